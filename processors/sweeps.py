"""The agents' sweeps of what the product and control databases keep only for a while:
finished rebuilds and the answers to requests not started, resolved quarantine
entries, and processes gone (with their pause acknowledgements).

What each table keeps is ``db.product.sweeps``' and ``db.control.sweeps``'; every
delete goes a bounded batch at a time (``db.batched_delete``), so a pass holds
nothing for long and a large backlog is worked off over several passes. Every agents
worker runs it on its housekeeping timer (``processors.agents.housekeeping``); two
passes at once delete disjoint or already-deleted rows. A crash mid-pass leaves the
rest for the next one.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from db.control import sweeps as control_sweeps
from db.product import sweeps as product_sweeps


@dataclass(frozen=True, slots=True)
class SweepPolicy:
    rebuild_seconds: float
    quarantine_seconds: float
    process_seconds: float
    batch: int


def sweep_once(product_dsn: str, control_dsn: str, policy: SweepPolicy) -> dict[str, int]:
    """One pass over both databases; rows deleted, by what they were."""
    with psycopg.connect(product_dsn, autocommit=True) as conn:
        swept = {
            "rebuild": product_sweeps.finished_rebuilds(conn, policy.rebuild_seconds, policy.batch),
            "control_answer": product_sweeps.control_answers(
                conn, policy.rebuild_seconds, policy.batch
            ),
            "quarantine": product_sweeps.resolved_quarantine(
                conn, policy.quarantine_seconds, policy.batch
            ),
        }
    with psycopg.connect(control_dsn, autocommit=True) as conn:
        swept["process"] = control_sweeps.gone_processes(conn, policy.process_seconds, policy.batch)
    return swept
