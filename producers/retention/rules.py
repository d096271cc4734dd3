"""The retention rules as plain functions: the floor, and how far a prune may go.

A holder allows pruning through a position: a consumer through the progress it
reported (0 until it reports), a live lease through its pin. The floor is the
lowest of them. Pruning also never passes what the relay has published, and never
removes more than one batch per transaction.

A fenced stream (an abandoned history epoch, ``db.resolver.fencing``) follows its own rule
(``fenced_step``): nothing of it goes while it is kept as history, then all of it,
whatever its holders say, one batch per transaction.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, Protocol

HolderKind = Literal["consumer", "lease"]

# What stops a prune batch when no holder does.
PUBLICATION = "publication"
BATCH_SIZE = "batch size"
RETENTION_AGE = "retention age"
# What stops a prune batch of a fenced stream.
FENCED_HISTORY = "fenced history"
HISTORY_END = "end of fenced history"


@dataclass(frozen=True, slots=True)
class Holder:
    kind: HolderKind
    name: str
    position: int

    def __str__(self) -> str:
        return f"{self.kind} {self.name!r} at {self.position}"


def consumer_holder(consumer_id: str, reported_position: int | None) -> Holder:
    """A consumer that never reported holds the floor at 0."""
    return Holder("consumer", consumer_id, reported_position or 0)


class _Registered(Protocol):
    @property
    def consumer_id(self) -> str: ...
    @property
    def reported_position(self) -> int | None: ...


class _Standing(Protocol):
    @property
    def consumer_id(self) -> str: ...


def consumer_holders(
    registered: Iterable[_Registered], standing: Iterable[_Standing]
) -> list[Holder]:
    """The consumers holding one stream: every registered one at its progress, and
    every standing consumer not registered on it at 0 (it has seen nothing yet)."""
    holders = [consumer_holder(c.consumer_id, c.reported_position) for c in registered]
    seen = {h.name for h in holders}
    holders += [consumer_holder(s.consumer_id, None) for s in standing if s.consumer_id not in seen]
    return holders


def lease_holder(lease_id: str, holder: str, pinned_position: int) -> Holder:
    return Holder("lease", f"{lease_id} ({holder})", pinned_position)


def retention_floor(holders: Iterable[Holder]) -> Holder | None:
    """The holder with the lowest position (ties: consumers first, then by name), or
    None when nothing is registered and no lease is live: then only publication
    and the retention age limit pruning."""
    return min(holders, key=lambda h: (h.position, h.kind, h.name), default=None)


@dataclass(frozen=True, slots=True)
class PruneStep:
    """Prune positions ``(pruned_through, through]``; ``limited_by`` says what stopped
    it there (a holder, or one of the constants above)."""

    through: int
    limited_by: str


def prune_step(
    pruned_through: int, floor: Holder | None, published: int, batch_size: int
) -> PruneStep:
    """How far one batch may prune, before the retention age is looked at.

    Never below ``pruned_through`` (a floor under it means: prune nothing more).
    """
    limits = [(published, PUBLICATION), (pruned_through + batch_size, BATCH_SIZE)]
    if floor is not None:
        limits.insert(0, (floor.position, str(floor)))
    through, limited_by = min(limits, key=lambda limit: limit[0])
    return PruneStep(max(through, pruned_through), limited_by)


def limit_by_age(step: PruneStep, first_too_young: int | None) -> PruneStep:
    """Stop just before the first row younger than the retention age, so what is
    pruned stays a contiguous prefix of old rows."""
    if first_too_young is None or first_too_young > step.through:
        return step
    return PruneStep(first_too_young - 1, RETENTION_AGE)


def fenced_step(pruned_through: int, history_end: int, kept: bool, batch_size: int) -> PruneStep:
    """How far one batch may prune a fenced stream whose history ends at
    ``history_end`` (its cursor when fenced: it takes no more writes).

    While ``kept`` (its retention period since the fence is not over) nothing goes.
    After it, every row goes, published or not, past every consumer's progress and
    every lease's pin: the epoch is dead, so those will never move again and must
    not hold it for ever. The retention age plays no part (every row is older than
    the fence).
    """
    if kept:
        return PruneStep(pruned_through, FENCED_HISTORY)
    through = min(history_end, pruned_through + batch_size)
    limited_by = BATCH_SIZE if through < history_end else HISTORY_END
    return PruneStep(max(through, pruned_through), limited_by)
