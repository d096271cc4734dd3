"""What became of each traced message of a batch, for its ``agents apply`` span.

Only a batch with a message carrying a ``traceparent``, in agents that trace
(``schemas.tracing``), keeps these (``BatchResult.traced``); every other batch pays one
check per batch. Each message is noted by (partition, offset) with its event (None
when its bytes did not decode) and its outcome: ``applied``, ``ignored_stale``,
``parked``, ``ignored_old_epoch``, ``quarantined``, ``deferred_paused``, ``held_epoch``
as the applier judged it, or ``duplicate`` for a copy the inbox or the stream's
progress already had (a rewound stream's event, quarantined before the plan, reads
as one too).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence

from processors.applier.messages import Decoded, RawMessage
from processors.applier.plan import IGNORED_OLD_EPOCH, QUARANTINED
from schemas.events import Envelope
from schemas.tracing import wanted

TracedOutcomes = dict[tuple[int, int], tuple[Envelope | None, str]]
"""(partition, offset) of a traced message → its event and outcome."""

DUPLICATE = "duplicate"
DEFERRED_PAUSED = "deferred_paused"
HELD_EPOCH = "held_epoch"


def kept_for(messages: Sequence[RawMessage]) -> TracedOutcomes | None:
    """An empty record when a message of the batch is traced, else None."""
    if not wanted() or all(m.traceparent is None for m in messages):
        return None
    return {}


def note(
    traced: TracedOutcomes | None, message: RawMessage, event: Envelope | None, outcome: str
) -> None:
    """Record ``message``'s outcome, if the batch keeps them and it is traced."""
    if traced is not None and message.traceparent is not None:
        traced[(message.partition, message.offset)] = (event, outcome)


def note_judged(
    traced: TracedOutcomes | None,
    decoded: Iterable[Decoded],
    outcomes: Mapping[uuid.UUID, str],
    current_epochs: Mapping[tuple[str, str], int],
) -> None:
    """The outcomes of a transaction's decoded events: the plan's (``outcomes``), an
    old epoch's, else a duplicate's."""
    if traced is None:
        return
    for d in decoded:
        outcome = outcomes.get(d.event.event_id)
        if outcome is None:
            current = current_epochs.get((d.event.tenant_id, d.event.catalog_id), 0)
            outcome = IGNORED_OLD_EPOCH if d.event.history_epoch < current else DUPLICATE
        note(traced, d.message, d.event, outcome)


def note_aside(
    traced: TracedOutcomes | None,
    undecodable: Iterable[RawMessage],
    unknown_epoch: Iterable[Decoded],
    paused: Iterable[Decoded],
    held: Iterable[Decoded],
) -> None:
    """The outcomes of what a batch set aside instead of judging it."""
    if traced is None:
        return
    for message in undecodable:
        note(traced, message, None, QUARANTINED)
    for d in unknown_epoch:
        note(traced, d.message, d.event, QUARANTINED)
    for d in paused:
        note(traced, d.message, d.event, DEFERRED_PAUSED)
    for d in held:
        note(traced, d.message, d.event, HELD_EPOCH)
