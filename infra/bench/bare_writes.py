"""The write path's limits, for phase (a): the same rows with no domain code.

Two baselines of ``record_decision``:

- ``BareBulk``: a decision of ``b`` new items as a bare set-based write of the same
  rows — the decision, its items, its effects and its outbox rows, one statement per
  table (the outbox's with the cursor move), one transaction, no wake-up of the
  relay, into the same tables
  with their indexes, constraints and triggers. The values are bytes encoded once
  beforehand, of the sizes the real events have. It is the most PostgreSQL can take
  for this shape, whatever the code above it.
- ``SqlReplay``: the statements one real one-item decision sent, recorded once per
  stream, sent again with new ids and the next positions, and no Python domain code
  in between. It is the limit for one-item decisions: the same round trips, nothing
  else.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from schemas.codec import CODEC
from schemas.events import Envelope, StreamKey

EPOCH = 1
"""The bare writer's streams are its own: no epoch is issued for them."""


def _encoded(envelopes: list[Envelope]) -> tuple[bytes, bytes]:
    """One decision event's and one item event's encoded value (sizes to copy)."""
    decision = next(e for e in envelopes if e.aggregate.type == "decision")
    item = next(e for e in envelopes if e.aggregate.type == "catalog_item")
    return CODEC.encode_value(decision), CODEC.encode_value(item)


@dataclass(slots=True)
class BareBulk:
    """Writes the rows of a rule decision of new items without the write path.

    ``template`` is a real decision's envelopes (its first event the decision's, then
    one per item), whose value bytes stand in for each event of the same kind.
    """

    template: list[Envelope]
    _decision_value: bytes = b""
    _item_value: bytes = b""

    def __post_init__(self) -> None:
        self._decision_value, self._item_value = _encoded(self.template)

    def prepare(self, pool: ConnectionPool, tenant_id: str, catalog_id: str) -> None:
        """The stream's cursor row (a first writer's job, outside the clock)."""
        with pool.connection() as conn:
            conn.execute(
                "INSERT INTO stream_cursor (tenant_id, catalog_id, history_epoch)"
                " VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                (tenant_id, catalog_id, EPOCH),
            )

    def write(
        self,
        pool: ConnectionPool,
        tenant_id: str,
        catalog_id: str,
        item_ids: list[str],
        item: Callable[[str], tuple[str, str, dict[str, str]]],
    ) -> int:
        """One transaction: decision, items, effects, outbox rows and cursor; returns
        the events written. ``item(id)`` gives an item's class, title and attributes."""
        decision_id = uuid.uuid4()
        n = len(item_ids) + 1
        rows = [item(i) for i in item_ids]
        key = CODEC.encode_key(StreamKey(tenant_id=tenant_id, catalog_id=catalog_id))
        with pool.connection() as conn:
            conn.execute(
                "INSERT INTO decision (tenant_id, catalog_id, decision_id, action, actor,"
                " actor_kind, rationale, evidence) VALUES (%s, %s, %s, 'create', 'rule:bench',"
                " 'rule', 'new items in the capture', %s)",
                (
                    tenant_id,
                    catalog_id,
                    decision_id,
                    Jsonb([{"capture_id": "bench-capture", "locator": "$.items"}]),
                ),
            )
            conn.execute(
                "INSERT INTO catalog_item (tenant_id, catalog_id, item_id, class_id, status,"
                " title, attributes, revision, decision_id)"
                " SELECT %(t)s, %(c)s, r.item_id, r.class_id, 'active', r.title,"
                " r.attributes::jsonb, 1, %(d)s"
                " FROM unnest(%(ids)b::text[], %(classes)b::text[], %(titles)b::text[],"
                " %(attributes)b::text[]) AS r(item_id, class_id, title, attributes)",
                {
                    "t": tenant_id,
                    "c": catalog_id,
                    "d": decision_id,
                    "ids": item_ids,
                    "classes": [r[0] for r in rows],
                    "titles": [r[1] for r in rows],
                    "attributes": [json.dumps(r[2]) for r in rows],
                },
            )
            conn.execute(
                "INSERT INTO decision_effect (tenant_id, catalog_id, aggregate_type,"
                " aggregate_id, revision, role, decision_id)"
                " SELECT %(t)s, %(c)s, e.type, e.id, 1, 'changed', %(d)s"
                " FROM unnest(%(types)b::text[], %(ids)b::text[]) AS e(type, id)",
                {
                    "t": tenant_id,
                    "c": catalog_id,
                    "d": decision_id,
                    "types": ["decision"] + ["catalog_item"] * len(item_ids),
                    "ids": [str(decision_id), *item_ids],
                },
            )
            conn.execute(
                "WITH moved AS (UPDATE stream_cursor SET position = position + %(n)s,"
                " updated_at = now() WHERE tenant_id = %(t)s AND catalog_id = %(c)s"
                " AND history_epoch = %(e)s RETURNING position - %(n)s AS base),"
                " new_rows AS (INSERT INTO outbox (tenant_id, catalog_id, history_epoch,"
                " position, event_id, event_type, key, value)"
                " SELECT %(t)s, %(c)s, %(e)s, moved.base + r.ord, r.event_id, r.event_type,"
                " %(key)b, r.value FROM moved, unnest(%(ids)b::uuid[], %(types)b::text[],"
                " %(values)b::bytea[]) WITH ORDINALITY AS r(event_id, event_type, value, ord)"
                " RETURNING 1)"
                " SELECT count(*) FROM new_rows",
                {
                    "n": n,
                    "t": tenant_id,
                    "c": catalog_id,
                    "e": EPOCH,
                    "key": key,
                    "ids": [uuid.uuid4() for _ in range(n)],
                    "types": ["decision.recorded"] + ["catalog_item.upserted"] * len(item_ids),
                    "values": [self._decision_value] + [self._item_value] * len(item_ids),
                },
            )
        return n


Statement = tuple[str, Any, bool]
"""A statement, its parameters, and whether it was sent in a pipeline."""


SYNC = "-- sync"
"""Where a recorded pipeline ended (its one wait for the server's answers)."""

COMMIT = "COMMIT"
"""The transaction's commit, in a recording: the Unit of Work's COMMIT statement, or
``Connection.commit`` (recorded as that statement)."""


class RecordingConnection(psycopg.Connection[Any]):
    """A connection that keeps every statement it is given, and its commit, while
    ``recording`` is set."""

    recording: list[Statement] | None = None

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        self._record(query, params)
        return super().execute(query, params, **kwargs)

    def commit(self) -> None:
        # psycopg sends COMMIT only inside a transaction; a commit with none open (the
        # pool's, as a connection goes back) sends nothing, so it is not recorded: a
        # replay of it would be a round trip the decision never made.
        if self.pgconn.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            self._record(COMMIT, None)
        super().commit()

    @contextlib.contextmanager
    def pipeline(self) -> Iterator[psycopg.Pipeline]:
        with super().pipeline() as pipeline:
            yield pipeline
        if self.recording is not None:
            self.recording.append((SYNC, None, True))

    def _record(self, query: Any, params: Any) -> None:
        if self.recording is not None:
            self.recording.append((query, params, self.pgconn.pipeline_status != 0))


POSITIONS = ("base", "cursor", "at", "to")
"""The parameters holding stream positions: the outbox rows' base and the cursor's
move, plain (under the lock) or in a joined write's parts (``w1_base``, ``w0_at``)."""


@dataclass(slots=True)
class SqlReplay:
    """Replays one recorded one-item decision's statements on its stream, renamed.

    Statements the decision sent in a pipeline are sent in one again, ending where
    its pipelines ended (each with one wait at its end), the others one round trip
    each, as recorded; so are its BEGIN and COMMIT, on a connection in autocommit
    mode as the Unit of Work's is (so that psycopg adds no BEGIN of its own).

    Every id the recorded decision had (its decision id and event ids, as values or as
    text) becomes a new uuid in each replay, the same one wherever it appears; its
    item id becomes ``<item_prefix>-<n>``; the outbox statement's base position and the
    cursor's positions (``POSITIONS``) move on by ``events`` each time.
    """

    statements: list[Statement]
    uuids: dict[object, int]
    """Recorded uuid (as a value or its text) -> which new uuid replaces it."""
    item_id: str
    item_prefix: str
    events: int
    replays: int = 0
    """How many replays were sent: the next one's number."""

    @classmethod
    def of(
        cls, statements: list[Statement], envelopes: list[Envelope], item_id: str, prefix: str
    ) -> SqlReplay:
        ids: list[uuid.UUID] = [e.event_id for e in envelopes]
        ids += [uuid.UUID(e.aggregate.id) for e in envelopes if e.aggregate.type == "decision"]
        uuids: dict[object, int] = {}
        for slot, old in enumerate(ids):
            uuids[old] = slot
            uuids[str(old)] = slot
        return cls(statements, uuids, item_id, prefix, len(envelopes))

    def _params(self, params: Any, n: int, fresh: dict[int, uuid.UUID]) -> Any:
        shift = self.events * (n + 1)

        def rename(value: Any) -> Any:
            if isinstance(value, list):
                return [rename(v) for v in value]
            if isinstance(value, tuple):
                return tuple(rename(v) for v in value)
            if isinstance(value, (str, uuid.UUID)):
                if value == self.item_id:
                    return f"{self.item_prefix}-{n}"
                slot = self.uuids.get(value)
                if slot is not None:
                    new = fresh.setdefault(slot, uuid.uuid4())
                    return new if isinstance(value, uuid.UUID) else str(new)
            return value

        if not isinstance(params, dict):
            return rename(params)
        out = {}
        for key, value in params.items():
            if key.split("_", 1)[-1] in POSITIONS:
                out[key] = value + shift
            else:
                out[key] = rename(value)
        return out

    def write(self, pool: ConnectionPool) -> int:
        """Send the statements once more, as the next replay; returns the events."""
        n = self.replays
        self.replays += 1
        fresh: dict[int, uuid.UUID] = {}
        with pool.connection() as conn:
            conn.autocommit = True  # the recording has its BEGIN and COMMIT, as sent
            try:
                self._send(conn, n, fresh)
            finally:
                conn.rollback()  # a no-op unless a statement failed
                conn.autocommit = False
        return self.events

    def _send(self, conn: psycopg.Connection[Any], n: int, fresh: dict[int, uuid.UUID]) -> None:
        run: list[tuple[str, Any]] = []
        for query, params, pipelined in self.statements:
            if query == SYNC:
                self._send_pipelined(conn, run)
            elif pipelined:
                run.append((query, self._params(params, n, fresh)))
            else:
                conn.execute(query, self._params(params, n, fresh))
        if run:
            self._send_pipelined(conn, run)

    @staticmethod
    def _send_pipelined(conn: psycopg.Connection[Any], run: list[tuple[str, Any]]) -> None:
        with conn.pipeline():
            for query, params in run:
                conn.execute(query, params)
        run.clear()
