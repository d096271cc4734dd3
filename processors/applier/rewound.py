"""Deliveries that betray a rewound history: the applier's half of detecting a restore
nobody fenced (DESIGN §8).

A stream's positions are unique in the resolver's history. When the resolver
database is restored in place and the processes keep running unfenced, its cursor
goes back and new writes take positions this consumer already holds under other
event ids. Judged by position alone, each would be a late duplicate and vanish; each
would be applied on top of the lost history once past the old progress. Instead:

- a delivery at or below progress whose position the inbox holds under another
  event id (``reused``) flags the stream in the control database
  (``db.control.epochs.flag_rewound``, signal ``position_reused``); the resolver then refuses
  the stream's writes (``HISTORY_REWOUND``) until it is fenced;
- while the current epoch's stream is flagged (by this signal or the resolver's), every
  new delivery of it is quarantined ``STREAM_REWOUND`` (``hold``): nothing is applied
  over the old history and nothing is dropped unseen. The fence then makes them old
  epoch events: it supersedes their entries, and one retried anyway is recorded
  ``ignored_old_epoch``.

A position with no inbox row (never received, or pruned after the inbox window)
cannot tell: such a delivery stays a duplicate, as a true redelivery is. A position
an operator skipped without knowing its event id (``skips.position_event_id``) is no
evidence either.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Sequence

import psycopg

from db.control.epochs import POSITION_REUSED, EpochSource, Rewound
from processors.applier import inbox, skips
from processors.applier.messages import RawMessage
from processors.applier.quarantine import quarantine
from schemas.events import Envelope
from schemas.ids import StreamId
from schemas.logs import event_fields

log = logging.getLogger(__name__)

STREAM_REWOUND = "STREAM_REWOUND"
"""Quarantine code of a delivery held because its stream's history went back."""


def reused(
    conn: psycopg.Connection, consumer: str, events: Iterable[Envelope]
) -> dict[uuid.UUID, set[uuid.UUID]]:
    """Of ``events`` (new to the inbox, at or below their stream's progress), those
    whose position the consumer holds under another event id, with those ids."""
    behind = list(events)
    held = inbox.holders(conn, consumer, ((e.stream, e.position) for e in behind))
    found: dict[uuid.UUID, set[uuid.UUID]] = {}
    for e in behind:
        others = held.get((e.stream, e.position), set())
        others = others - {e.event_id, skips.position_event_id(e.stream, e.position)}
        if others:
            found[e.event_id] = others
    return found


def hold(
    conn: psycopg.Connection,
    consumer: str,
    epochs: EpochSource,
    current_epochs: dict[tuple[str, str], int],
    new: Sequence[tuple[Envelope, RawMessage]],
    reused_ids: dict[uuid.UUID, set[uuid.UUID]],
) -> tuple[set[uuid.UUID], int]:
    """Flag the streams of reused positions and quarantine every new delivery of a
    flagged stream; returns the ids held and the quarantine entries opened.

    Runs in the applier's transaction, in this order:
    1. flag each current-epoch stream with a reused position (control database, its
       own statement: committed whether or not the batch commits);
    2. quarantine ``STREAM_REWOUND`` each of ``new`` whose stream, at the current
       epoch, is flagged (the flag read with the cached epoch).
    A crash between 1 and the batch's COMMIT leaves the stream flagged and the
    delivery unrecorded: redelivered, it is held then. Flagging first means a
    delivery is never held while the resolver still takes the stream's writes.
    """
    current = {
        e.stream
        for e, _ in new
        if e.history_epoch == current_epochs.get((e.tenant_id, e.catalog_id))
    }
    flags: dict[StreamId, Rewound | None] = {}
    for event, _ in new:
        stream = event.stream
        if event.event_id not in reused_ids or stream not in current or stream in flags:
            continue
        others = ", ".join(sorted(map(str, reused_ids[event.event_id])))
        flags[stream] = epochs.flag_rewound(
            *stream,
            POSITION_REUSED,
            f"{consumer} received event {event.event_id} at position {event.position},"
            f" which it holds under event {others}",
        )
        flag = flags[stream]
        log.error(
            "stream %s/%s@%s rewound: position %s arrived again under another event id;"
            " its writes are refused until it is fenced: %s",
            *stream,
            event.position,
            flag.fix if flag else "(no longer the current epoch)",
            extra=event_fields(stream, event.position, event.event_id),
        )
    for unflagged in current - flags.keys():
        flags[unflagged] = epochs.rewound(*unflagged)
    held: set[uuid.UUID] = set()
    opened = 0
    for event, message in new:
        flag = flags.get(event.stream)
        if flag is None:
            continue
        held.add(event.event_id)
        opened += quarantine(
            conn,
            consumer,
            message,
            STREAM_REWOUND,
            f"position {event.position}: {flag.describe()}",
            event,
        )
    return held, opened
