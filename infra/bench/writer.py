"""Phase (a): the gapless writer against a sequence-numbered outbox.

Both sides run the real write path, ``record_decision``, from the same connection
pool: a rule decision accepting ``b`` new items, so each transaction inserts the
decision row, upserts the items naming it, records the decision's effects, builds and
encodes one envelope per event (the decision's and each item's) with the same codec,
and inserts their bytes with one statement of the same shape (binary arrays through
``unnest``); both wake the relay after COMMIT through the same kind of notifier as
the resolver API (``db.resolver.commit_notifier``). What only the gapless side does
is the stream's cursor: ``SELECT … FOR UPDATE`` on the cursor row before the first
change, the ``UPDATE`` of the cursor inside the outbox statement, a foreign key from
the outbox row to it, and the wait for that row lock when writers share a stream.
The baseline's Unit of Work opens, in place of the locked stream writer, one that
numbers its outbox rows with an IDENTITY column (a sequence): that hands numbers to
transactions that later roll back and lets a reader see number p+1 committed before
p, exactly what the cursor exists to prevent.

Two more baselines bound the write path from above (``infra.bench.bare_writes``): a
bare set-based write of a 100-item decision's rows, one statement per table, and a
replay of the SQL statements of a one-item decision without the domain code.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Literal

import psycopg
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.resolver.commit_notifier import CommitNotifier
from db.stream_writer import StreamWriter
from db.unit_of_work import UnitOfWork
from infra.bench.bare_writes import BareBulk, RecordingConnection, SqlReplay, Statement
from infra.bench.sandbox import Echo, Sandbox
from infra.bench.timing import Rate, run_each_once, run_threads
from producers.resolver.catalog_items import ItemChange
from producers.resolver.decisions import Decision, record_decision
from schemas.codec import EventCodec
from schemas.events import Envelope, EvidenceRef
from schemas.ids import StreamId
from schemas.registry_codec import codec_for
from schemas.settings import SchemaRegistrySettings

THREADS = 8
CATALOG = "catalog1"
EVIDENCE = (EvidenceRef(capture_id="bench-capture", locator="$.items"),)

SEQ_OUTBOX_DDL = """
CREATE TABLE bench_seq_outbox (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id text NOT NULL,
    catalog_id text NOT NULL,
    history_epoch bigint NOT NULL,
    event_id uuid NOT NULL UNIQUE,
    event_type text NOT NULL,
    key bytea NOT NULL,
    value bytea NOT NULL,
    committed_at timestamptz NOT NULL DEFAULT now(),
    published_at timestamptz
);
CREATE INDEX bench_seq_outbox_unpublished_idx ON bench_seq_outbox (id)
    WHERE published_at IS NULL;
"""
"""The outbox as a sequence-numbered design would have it: the same columns, an
IDENTITY id instead of (stream, position), and a per-row ``published_at`` with its
unpublished-rows index. Ids commit out of order, so such a relay cannot record a
published-through id the way ``stream_publication`` records a position: it has to
mark rows."""


def row_of(item_id: str) -> tuple[str, str, dict[str, str]]:
    """The class, title and attributes of ``change``'s item, for the bare baseline."""
    return "shoe", f"Trail shoe {item_id}", {"colour": "blue", "size": "42"}


def change(tenant_id: str, item_id: str) -> ItemChange:
    """A new item; both sides of every comparison write exactly these rows."""
    class_id, title, attributes = row_of(item_id)
    return ItemChange(tenant_id, CATALOG, item_id, class_id, title, attributes=attributes)


def decision(tenant_id: str, ids: list[str]) -> Decision:
    """An automatic rule accepting new items ``ids``: ``len(ids) + 1`` events."""
    return Decision(
        tenant_id,
        CATALOG,
        "create",
        "rule:bench",
        "new items in the capture",
        EVIDENCE,
        facts=tuple(change(tenant_id, item_id) for item_id in ids),
        actor_kind="rule",
    )


@functools.cache
def users_codec() -> EventCodec:
    """The codec the deployed writers would use here: the Confluent framing through
    the registry ``gapless up`` configures, or the single-object one without it.
    Built once per process, as the resolver API builds its codec at start-up (before
    2026-12-06 the bench read its settings from the environment for every decision,
    about a quarter of a one-item decision's client CPU)."""
    return codec_for(SchemaRegistrySettings())


def write_gapless(
    pool: ConnectionPool,
    epochs: EpochSource,
    tenant: str,
    ids: list[str],
    notifier: CommitNotifier | None = None,
    unlocked_reads: bool = True,
) -> list[Envelope]:
    """One decision through ``record_decision``: reads, rows, outbox at commit (without
    ``unlocked_reads``, all of it under the cursor lock); with ``notifier``, the relay
    woken after the commit as the resolver API does."""
    with UnitOfWork(
        pool, epochs, users_codec(), notifier=notifier, unlocked_reads=unlocked_reads
    ) as uow:
        record_decision(uow, decision(tenant, ids))
        return uow.envelopes


@dataclass(frozen=True, slots=True)
class ProcessWriter:
    """A client process's connection, epochs and commit notifier
    (``infra.bench.client_processes``), kept across its rounds as a resolver API
    process keeps them; the notifier wakes the relay after each COMMIT."""

    pool: ConnectionPool
    epochs: EpochSource
    notifier: CommitNotifier

    def unit(self) -> UnitOfWork:
        return UnitOfWork(self.pool, self.epochs, users_codec(), notifier=self.notifier)


@functools.cache
def process_writer(resolver_dsn: str, control_dsn: str) -> ProcessWriter:
    """This process's ``ProcessWriter``, closed when its client group closes."""
    from infra.bench.client_processes import at_exit

    pool = ConnectionPool(resolver_dsn, min_size=1, max_size=1, open=True)
    epochs = EpochSource(control_dsn)
    notifier = CommitNotifier(resolver_dsn, "bench-client-notifier").start()
    for close in (notifier.close, epochs.close, pool.close):
        at_exit(close)
    return ProcessWriter(pool, epochs, notifier)


class SequencedWriter(StreamWriter):
    """``StreamWriter.flush`` with an IDENTITY-numbered outbox and no cursor.

    Same envelopes, encoding and statement shape; the position in the encoded
    envelope is 0, since a sequence-numbered outbox has no stream position.
    """

    def __init__(self, conn: psycopg.Connection, stream: StreamId, codec: EventCodec) -> None:
        super().__init__(conn, stream, 0, codec, notify=False)

    def flush(self) -> list[Envelope]:
        s = self.stream
        envelopes = [
            Envelope(
                tenant_id=s.tenant_id,
                catalog_id=s.catalog_id,
                history_epoch=s.history_epoch,
                position=0,
                event_id=event.event_id,
                aggregate=event.aggregate,
                dependencies=event.dependencies,
                occurred_at=event.occurred_at,
                payload=event.payload,
            )
            for event in self.pending
        ]
        if not envelopes:
            return []
        self._conn.execute(
            "WITH new_rows AS ("
            " INSERT INTO bench_seq_outbox (tenant_id, catalog_id, history_epoch,"
            " event_id, event_type, key, value)"
            " SELECT %(t)s, %(c)s, %(e)s, r.event_id, r.event_type, %(key)b, r.value"
            " FROM unnest(%(ids)b::uuid[], %(types)b::text[], %(values)b::bytea[])"
            " AS r(event_id, event_type, value) RETURNING 1)"
            " SELECT (SELECT count(*) FROM new_rows)",
            {
                "t": s.tenant_id,
                "c": s.catalog_id,
                "e": s.history_epoch,
                "key": self._key,
                "ids": [e.event_id for e in envelopes],
                "types": [e.event_type for e in envelopes],
                "values": [self._codec.encode_value(e) for e in envelopes],
            },
        )
        return envelopes


class SequencedUnitOfWork(UnitOfWork):
    """The Unit of Work with the cursor taken out: no lock, a sequence-numbered outbox.
    It wakes the relay as the gapless side does (after COMMIT through ``notifier``),
    or not at all without one. It has no cursor to check a write against, so it
    reads inside its transaction, as the gapless side did before its unlocked reads
    (``UnitOfWork.unlocked_first``)."""

    def __init__(
        self, pool: ConnectionPool, epochs: EpochSource, notifier: CommitNotifier | None
    ) -> None:
        super().__init__(pool, epochs, users_codec(), notifier=notifier, unlocked_reads=False)

    def _open_stream(self, conn: psycopg.Connection, stream: StreamId) -> StreamWriter:
        return SequencedWriter(conn, stream, users_codec())


def write_sequenced(
    pool: ConnectionPool,
    epochs: EpochSource,
    tenant: str,
    ids: list[str],
    notifier: CommitNotifier | None,
) -> None:
    """The same decision through ``record_decision`` into ``bench_seq_outbox``."""
    with SequencedUnitOfWork(pool, epochs, notifier) as uow:
        record_decision(uow, decision(tenant, ids))


Variant = Literal[
    "gapless", "sequenced", "sequenced-no-notify", "one-stream", "bare-bulk", "sql-replay"
]
"""``one-stream``: gapless, with every thread writing the same stream; ``bare-bulk`` and
``sql-replay``: the write path's limits (``infra.bench.bare_writes``)."""


@dataclass(slots=True)
class WriterFigures:
    gapless_b1: Rate
    baseline_b1: Rate
    gapless_b100: Rate
    baseline_b100: Rate
    baseline_b1_no_notify: Rate
    one_stream_b1: Rate
    one_stream_b100: Rate
    bare_bulk_b100: Rate
    sql_replay_b1: Rate


class WriterBench:
    """Runs each variant with 8 threads; thread ``i`` owns stream ``i`` of its side (the
    gapless writers' and the baselines' are tenants apart) unless shared."""

    def __init__(
        self,
        box: Sandbox,
        pool: ConnectionPool,
        epochs: EpochSource,
        notifier: CommitNotifier,
    ) -> None:
        self._box = box
        self._pool = pool
        self._epochs = epochs
        self._notifier = notifier
        self._bulk: BareBulk | None = None
        self._replays: list[SqlReplay] = []

    def setup(self) -> None:
        """The baselines' table and streams, and one recorded decision per replay
        stream (each after a first decision has made its cursor row and epoch)."""
        box, pool, epochs = self._box, self._pool, self._epochs
        with pool.connection() as conn:
            conn.execute(SEQ_OUTBOX_DDL)
        template = write_gapless(pool, epochs, box.tenant("template"), ["template-1"])
        self._bulk = BareBulk(template)
        for thread in range(THREADS):
            self._bulk.prepare(pool, box.tenant(f"k{thread}"), CATALOG)
        recorder: ConnectionPool = ConnectionPool(
            box.databases.resolver_dsn,
            min_size=1,
            max_size=1,
            connection_class=RecordingConnection,
            open=True,
        )
        try:
            for thread in range(THREADS):
                tenant = box.tenant(f"q{thread}")
                write_gapless(pool, epochs, tenant, [f"q{thread}-first"])
                recorded: list[Statement] = []
                with recorder.connection() as conn:
                    assert isinstance(conn, RecordingConnection)
                    conn.recording = recorded
                envelopes = write_gapless(recorder, epochs, tenant, [f"q{thread}-recorded"])
                with recorder.connection() as conn:
                    assert isinstance(conn, RecordingConnection)
                    conn.recording = None
                self._replays.append(
                    SqlReplay.of(recorded, envelopes, f"q{thread}-recorded", f"q{thread}")
                )
        finally:
            recorder.close()

    def run(self, label: str, seconds: float, batch: int, variant: Variant) -> Rate:
        """Run ``variant`` with decisions of ``batch`` new items (``batch + 1`` events) per
        transaction; ``label`` keeps item ids apart."""
        box, pool, epochs = self._box, self._pool, self._epochs

        def tenant(thread: int) -> str:
            if variant == "one-stream":
                return box.tenant("shared")
            # The baselines' streams are tenants of their own: a sequenced unit has no
            # cursor, and its commit would leave this process believing a gapless
            # stream's cursor at 0 (``db.unlocked.known_cursors``), so that each
            # gapless slice began with a refused write and read its cursor for 5 s
            # (``doubted``). Until 2026-12-07 (session 36) it did.
            return box.tenant(f"{'w' if variant == 'gapless' else 's'}{thread}")

        def work(thread: int, n: int) -> int:
            ids = [f"{label}-{thread}-{n}-{k}" for k in range(batch)]
            if variant == "bare-bulk":
                assert self._bulk is not None
                return self._bulk.write(pool, box.tenant(f"k{thread}"), CATALOG, ids, row_of)
            if variant in ("gapless", "one-stream"):
                write_gapless(pool, epochs, tenant(thread), ids, self._notifier)
            else:
                notifier = self._notifier if variant == "sequenced" else None
                write_sequenced(pool, epochs, tenant(thread), ids, notifier)
            return batch + 1  # the decision's event and one per item

        # One warm-up transaction per thread outside the clock: cursor rows, epochs
        # and pooled connections exist before timing starts. A replay's numbers go on
        # from where its stream's last one stopped.
        if variant == "sql-replay":
            return self._run_replays(label, seconds)
        run_each_once(THREADS, lambda thread, _n: work(thread, -1))
        return run_threads(THREADS, seconds, work)

    def _run_replays(self, label: str, seconds: float) -> Rate:
        def work(thread: int, n: int) -> int:
            replay = self._replays[thread]
            replay.item_prefix = f"{label}-{thread}"
            return replay.write(self._pool)

        run_each_once(THREADS, work)
        return run_threads(THREADS, seconds, work)


def measure_writer(
    box: Sandbox, pool: ConnectionPool, epochs: EpochSource, seconds: float, echo: Echo
) -> WriterFigures:
    """Gapless and baseline in alternating slices (so drift hits both), then one stream."""
    notifier = CommitNotifier(box.databases.resolver_dsn, "bench-writer-notifier").start()
    try:
        return _measure(WriterBench(box, pool, epochs, notifier), seconds, echo)
    finally:
        notifier.close()


def _measure(bench: WriterBench, seconds: float, echo: Echo) -> WriterFigures:
    bench.setup()
    figures = WriterFigures(*(Rate() for _ in range(9)))
    rounds = 4
    slice_s = seconds / rounds
    plan: list[tuple[str, int, Variant, Rate]] = [
        ("g1", 1, "gapless", figures.gapless_b1),
        ("s1", 1, "sequenced", figures.baseline_b1),
        ("n1", 1, "sequenced-no-notify", figures.baseline_b1_no_notify),
        ("g100", 100, "gapless", figures.gapless_b100),
        ("s100", 100, "sequenced", figures.baseline_b100),
        ("k100", 100, "bare-bulk", figures.bare_bulk_b100),
        ("q1", 1, "sql-replay", figures.sql_replay_b1),
    ]
    for r in range(rounds):
        echo(f"writer: gapless and baselines at batch 1 and 100, round {r + 1}/{rounds}")
        for label, batch, variant, total in plan:
            total.add(bench.run(f"{label}r{r}", slice_s, batch, variant))
    echo("writer: 8 writers on one stream, batch 1")
    figures.one_stream_b1.add(bench.run("o1", seconds / 2, 1, "one-stream"))
    echo("writer: 8 writers on one stream, batch 100")
    figures.one_stream_b100.add(bench.run("o100", seconds / 2, 100, "one-stream"))
    return figures
