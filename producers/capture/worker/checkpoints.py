"""Job checkpoints: the only module that moves them (through
``db.repositories.capture_checkpoints``; a unit test holds every other module to it).

A run loads its job's checkpoint for the extraction it works on, then moves it one
product at a time, each move a compare-and-set from the value the run holds to the
next, inside the same transaction as that product's outcome: the checkpoint never
passes a product whose outcome (terminal, or a durable retry record) is not
committed with it, and a failed move rolls the product's writes back. A run whose
compare-and-set finds another value is stale: it gets the persisted winner and
never writes over it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from db.repositories import capture_checkpoints as rows
from db.unit_of_work import Transaction


class CheckpointLost(Exception):
    """Another run moved the checkpoint first; ``winner`` is the persisted value."""

    def __init__(self, expected: int, winner: int) -> None:
        super().__init__(f"checkpoint moved by another run: expected {expected}, found {winner}")
        self.expected = expected
        self.winner = winner


@dataclass(frozen=True, slots=True)
class CheckpointRef:
    """One job's checkpoint over the extraction of one parser version."""

    tenant_id: str
    job_id: uuid.UUID
    parser_version: int


def start(tx: Transaction, ref: CheckpointRef, items: int) -> int:
    """The checkpoint as this run finds it (created at 0 for a first run)."""
    row = rows.load_or_start(tx, ref.tenant_id, ref.job_id, ref.parser_version, items)
    return row.next_item


def persisted(tx: Transaction, ref: CheckpointRef) -> int:
    """The committed value (the winner, after a lost compare-and-set)."""
    row = rows.get(tx, ref.tenant_id, ref.job_id, ref.parser_version)
    return row.next_item if row else 0


def advance(tx: Transaction, ref: CheckpointRef, expected: int, to: int) -> None:
    """Move the checkpoint from ``expected`` to ``to`` in ``tx``; raises
    ``CheckpointLost`` (and the caller rolls ``tx`` back) when another run moved it."""
    if not rows.compare_and_set(tx, ref.tenant_id, ref.job_id, ref.parser_version, expected, to):
        raise CheckpointLost(expected, persisted(tx, ref))


def forget(tx: Transaction, tenant_id: str, job_ids: list[uuid.UUID]) -> int:
    """Delete the checkpoints of finished jobs whose capture is going (the evidence
    sweep, in its transaction); returns how many went."""
    return rows.delete_of_jobs(tx, tenant_id, job_ids)
