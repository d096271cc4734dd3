"""Retention control under concurrency, with real threads and connections.

Registrations, progress reports, lease creation, advancement and release, and
pruners run at the same time on one stream, while deletes are slowed down (2 ms a
row) so each prune batch stays open long enough for the others to land inside it.
Whatever the schedule, nothing at or above any floor is deleted: every consumer
keeps every event above max(the ``pruned_through`` its registration returned, its
progress), every live lease every event above its pin, and what is left is exactly
the positions above ``pruned_through``, never a published-but-young or unpublished
row less.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from db.resolver import retention as sql
from db.resolver.retention import pruned_through
from db.settings import DatabaseSettings
from db.tables import table_names
from producers.retention import consumers, leases
from producers.retention.exceptions import ConsumerNeedsRebuild
from producers.retention.pruner import RetentionPolicy, prune_stream
from schemas.ids import StreamId
from tests.integration.producers.retention.streams import ready_stream, retained_positions

N, PUBLISHED, OLD = 60, 50, 45  # so nothing above 45 may ever go
AGE = 600


def policy(batch: int) -> RetentionPolicy:
    return RetentionPolicy(age_seconds=AGE, batch_size=batch)


def connect(settings: DatabaseSettings) -> psycopg.Connection:
    return psycopg.connect(settings.resolver_dsn, autocommit=True)


def run_together(*work: Callable[[], None]) -> None:
    """Start every callable on its own thread at the same moment; re-raise failures."""
    barrier = threading.Barrier(len(work))
    failures: list[BaseException] = []

    def start(fn: Callable[[], None]) -> None:
        barrier.wait()
        try:
            fn()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=start, args=(fn,)) for fn in work]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    if failures:
        raise failures[0]


def wait_until_pruned(settings: DatabaseSettings, stream: StreamId, at_least: int) -> int:
    with connect(settings) as conn:
        while (position := pruned_through(conn, stream)) < at_least:
            pass
    return position


# Single schedules, chosen ---------------------------------------------------------


def test_a_registration_during_a_running_prune_keeps_what_it_was_told(
    clean_db: DatabaseSettings, slow_deletes: None
) -> None:
    stream = ready_stream(clean_db, n=N, published=N, old=N)
    with connect(clean_db) as conn:
        consumers.report(conn, stream, "caught-up", N)
    seen: list[int] = []

    def prune() -> None:
        with connect(clean_db) as conn:
            prune_stream(conn, stream, policy(4))

    def register() -> None:
        wait_until_pruned(clean_db, stream, 8)
        with connect(clean_db) as conn:
            seen.append(consumers.register(conn, stream, "late").pruned_through)

    run_together(prune, register)
    (told,) = seen
    assert 8 <= told < N  # it landed while the pruner was running
    assert retained_positions(clean_db, stream) == list(range(told + 1, N + 1))


def test_a_lease_taken_during_a_running_prune_keeps_its_pin(
    clean_db: DatabaseSettings, slow_deletes: None
) -> None:
    stream = ready_stream(clean_db, n=N, published=N, old=N)
    with connect(clean_db) as conn:
        consumers.report(conn, stream, "caught-up", N)
    pins: list[int] = []

    def prune() -> None:
        with connect(clean_db) as conn:
            prune_stream(conn, stream, policy(4))

    def take_lease() -> None:
        wait_until_pruned(clean_db, stream, 8)
        with connect(clean_db) as conn:
            pins.append(leases.create(conn, stream, "rebuild", 600).pinned_position)

    run_together(prune, take_lease)
    (pin,) = pins
    assert 8 <= pin < N
    assert retained_positions(clean_db, stream) == list(range(pin + 1, N + 1))


def test_two_pruners_at_once_delete_each_row_once(
    clean_db: DatabaseSettings, slow_deletes: None
) -> None:
    stream = ready_stream(clean_db, n=40, published=40, old=40)
    deleted: list[int] = []

    def prune() -> None:
        with connect(clean_db) as conn:
            deleted.append(prune_stream(conn, stream, policy(3)).deleted)

    run_together(prune, prune)
    assert sum(deleted) == 40
    assert retained_positions(clean_db, stream) == []
    with connect(clean_db) as conn:
        assert pruned_through(conn, stream) == 40


# Any schedule ---------------------------------------------------------------------

Op = tuple[str, int, int]
ops = st.one_of(
    st.tuples(st.just("register"), st.just(0), st.just(0)),
    st.tuples(st.just("report"), st.integers(0, 4), st.integers(0, N)),
    st.tuples(st.just("lease"), st.just(0), st.just(0)),
    st.tuples(st.just("advance"), st.integers(0, 4), st.integers(0, N)),
    st.tuples(st.just("release"), st.integers(0, 4), st.just(0)),
    st.tuples(st.just("deregister"), st.integers(0, 4), st.just(0)),
    st.tuples(st.just("prune"), st.integers(1, 8), st.just(0)),
)
schedules = st.lists(st.lists(ops, min_size=1, max_size=6), min_size=2, max_size=3)


@dataclass
class Worker:
    """One thread's operations and the guarantees they obtained."""

    number: int
    settings: DatabaseSettings
    stream: StreamId
    registered: dict[str, int] = field(default_factory=dict)  # consumer -> pruned_through told
    leased: dict[uuid.UUID, int] = field(default_factory=dict)  # lease -> pin at creation
    deleted: int = 0
    # First reports refused because they fell below pruned-through (consumer, position).
    refused: list[tuple[str, int]] = field(default_factory=list)

    def run(self, schedule: list[Op]) -> None:
        with connect(self.settings) as conn:
            for op, arg, position in schedule:
                self.step(conn, op, arg, position)

    def step(self, conn: psycopg.Connection, op: str, arg: int, position: int) -> None:
        mine = sorted(self.registered)
        leased = list(self.leased)
        if op == "register":
            name = f"w{self.number}-{len(self.registered)}"
            self.registered[name] = consumers.register(conn, self.stream, name).pruned_through
        elif op == "report":
            name = mine[arg % len(mine)] if mine and arg else "base"
            try:
                consumers.report(conn, self.stream, name, position)
            except ConsumerNeedsRebuild:
                self.refused.append((name, position))
        elif op == "lease":
            lease = leases.create(conn, self.stream, f"w{self.number}", 600)
            self.leased[lease.lease_id] = lease.pinned_position
        elif op == "advance" and leased:
            leases.advance(conn, leased[arg % len(leased)], position)
        elif op == "release" and leased:
            lease_id = leased[arg % len(leased)]
            leases.release(conn, lease_id)
            del self.leased[lease_id]
        elif op == "deregister" and mine:
            name = mine[arg % len(mine)]
            consumers.deregister(conn, self.stream, name)
            del self.registered[name]
        elif op == "prune":
            self.deleted += prune_stream(conn, self.stream, policy(arg)).deleted


@dataclass
class Monitor:
    """Watches the stream in consistent snapshots while the workers run: what is
    retained is always exactly the positions above ``pruned_through``, which never
    moves back."""

    settings: DatabaseSettings
    stream: StreamId
    stop: threading.Event = field(default_factory=threading.Event)
    watching: threading.Event = field(default_factory=threading.Event)
    problems: list[str] = field(default_factory=list)
    looks: int = 0

    def run(self) -> None:
        last = 0
        s = self.stream
        with connect(self.settings) as conn:
            while not self.stop.is_set():
                with conn.transaction():
                    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                    pruned = pruned_through(conn, s)
                    row = conn.execute(
                        "SELECT count(*), min(position), max(position) FROM outbox"
                        " WHERE tenant_id = %s AND catalog_id = %s AND history_epoch = %s",
                        (s.tenant_id, s.catalog_id, s.history_epoch),
                    ).fetchone()
                assert row is not None
                if tuple(row) != (N - pruned, pruned + 1, N) and not (pruned == N and row[0] == 0):
                    self.problems.append(f"pruned through {pruned} but retained {tuple(row)}")
                if pruned < last:
                    self.problems.append(f"pruned_through moved back from {last} to {pruned}")
                last = pruned
                self.looks += 1
                self.watching.set()


def reset(settings: DatabaseSettings) -> None:
    for dsn, name in ((settings.resolver_owner_dsn, "resolver"), (settings.control_dsn, "control")):
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"TRUNCATE {', '.join(table_names(name))} CASCADE")


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(schedule=schedules, base=st.integers(0, N))
def test_no_schedule_deletes_anything_at_or_above_a_floor(
    clean_db: DatabaseSettings, slow_deletes: None, schedule: list[list[Op]], base: int
) -> None:
    reset(clean_db)  # clean_db runs once per test, not per example
    stream = ready_stream(clean_db, n=N, published=PUBLISHED, old=OLD)
    with connect(clean_db) as conn:
        consumers.report(conn, stream, "base", base)
    workers = [Worker(i, clean_db, stream) for i in range(len(schedule))]
    monitor = Monitor(clean_db, stream)
    watcher = threading.Thread(target=monitor.run)
    watcher.start()
    try:
        # the workers start only once the monitor has taken its first look, so
        # it watches them even when their schedule is over in a few milliseconds
        assert monitor.watching.wait(timeout=30), "the monitor never took a look"
        run_together(*(lambda w=w, s=s: w.run(s) for w, s in zip(workers, schedule, strict=True)))
    finally:
        monitor.stop.set()
        watcher.join()

    with connect(clean_db) as conn:
        pruned = pruned_through(conn, stream)
        progress = {c.consumer_id: c.reported_position or 0 for c in sql.consumers(conn, stream)}
        pins = {
            lease.lease_id: lease.pinned_position
            for lease in sql.unreleased_leases(conn, stream)
            if not lease.expired
        }
    assert monitor.problems == [] and monitor.looks > 0
    assert pruned <= min(PUBLISHED, OLD)
    assert pruned <= progress["base"]
    for w in workers:
        for name, told in w.registered.items():
            assert pruned <= max(told, progress[name]), (name, told, progress[name], pruned)
        for lease_id, pin in w.leased.items():
            assert pruned <= max(pin, pins[lease_id]), (lease_id, pin, pins[lease_id], pruned)
    assert retained_positions(clean_db, stream) == list(range(pruned + 1, N + 1))
    assert sum(w.deleted for w in workers) == pruned
    # A refused first report was below what was pruned when it came, so the consumer
    # was told an earlier pruned-through at registration: it holds the floor there.
    with connect(clean_db) as conn:
        for w in workers:
            for name, position in w.refused:
                rows = [c for c in sql.consumers(conn, stream) if c.consumer_id == name]
                assert all(
                    r.reported_position is not None or r.refused_position is not None
                    for r in rows  # absent: deregistered since
                )
                assert position < pruned
