"""What the product database says of each stream's consumers, for the overview and a
stream's page: each consumer's durable progress (``infra.status``) and what it set
aside (``db.product.applier_backlog``), including a consumer with no progress row
on the stream yet (its first event quarantined, say)."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from db.product import applier_backlog
from infra import status


@dataclass
class Applied:
    """One product consumer of a stream: its durable progress (None: no progress row
    yet) and what it set aside."""

    position: int | None = None
    parked: int = 0
    quarantined: int = 0


ProductSide = dict[tuple[str, str, int], dict[str, Applied]]


def product_side(conn: psycopg.Connection) -> ProductSide:
    """Per stream and consumer: its applied position, parked and open quarantined."""
    found: ProductSide = {}
    for stream, states in status.consumer_states(conn).items():
        for state in states:
            found.setdefault(stream, {})[state.consumer] = Applied(state.progress)
    for (consumer, t, c, e), n in applier_backlog.parked_counts(conn).items():
        if e is not None:
            found.setdefault((t, c, e), {}).setdefault(consumer, Applied()).parked = n
    for (consumer, t, c, e), n in applier_backlog.open_quarantine_counts(conn).items():
        if e is not None:
            found.setdefault((t, c, e), {}).setdefault(consumer, Applied()).quarantined = n
    return found
