"""Waking the relay after COMMIT (``db.resolver.commit_notifier``) against real PostgreSQL: a
committed Unit of Work is announced once it committed and a rolled-back one never;
the transactions themselves carry no NOTIFY; the commits that follow a send within its
gathering pause share the next send, which a close sends at once; a notifier whose
connection was killed connects again and goes on announcing."""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.resolver.commit_notifier import CommitNotifier
from db.settings import DatabaseSettings
from db.stream_writer import NOTIFY_CHANNEL, PendingEvent
from db.unit_of_work import UnitOfWork
from schemas.codec import CODEC
from schemas.events import AggregateRef, CatalogItemRetired

DEADLINE_S = 15.0


@pytest.fixture()
def listener(clean_db: DatabaseSettings) -> Iterator[psycopg.Connection]:
    with psycopg.connect(clean_db.resolver_dsn, autocommit=True) as conn:
        conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
        yield conn


@pytest.fixture()
def notifier(clean_db: DatabaseSettings) -> Iterator[CommitNotifier]:
    n = CommitNotifier(clean_db.resolver_dsn, "test-notifier").start()
    yield n
    n.close()


def received(listener: psycopg.Connection, seconds: float, expected: int = 100) -> list[str]:
    """The notifications that arrive within ``seconds``, or the first ``expected``."""
    return [n.payload for n in listener.notifies(timeout=seconds, stop_after=expected)]


def write_one(pool: ConnectionPool, epochs: EpochSource, notifier: CommitNotifier | None,
              commit: bool) -> str:  # fmt: skip
    with UnitOfWork(pool, epochs, CODEC, notifier=notifier) as uow:
        writer = uow.stream("t1", "c1")
        writer.append(
            PendingEvent(
                aggregate=AggregateRef(type="catalog_item", id="i1", revision=2),
                payload=CatalogItemRetired(reason="test"),
            )
        )
        if commit:
            uow.commit()
        return str(writer.stream)


def test_a_commit_is_announced_after_it_and_a_rollback_never(
    clean_db: DatabaseSettings, listener: psycopg.Connection, notifier: CommitNotifier
) -> None:
    epochs = EpochSource(clean_db.control_dsn)
    with ConnectionPool(clean_db.resolver_dsn, min_size=1, max_size=1) as pool:
        stream = write_one(pool, epochs, notifier, commit=True)
        assert received(listener, DEADLINE_S, 1) == [stream]
        write_one(pool, epochs, notifier, commit=False)
        assert received(listener, 1.0) == []
        # Without a notifier the transaction notifies at COMMIT, as before.
        assert received(listener, 0.1) == []
        write_one(pool, epochs, None, commit=True)
        assert received(listener, DEADLINE_S, 1) == [stream]
    epochs.close()
    assert notifier.sent == 1


def test_the_outbox_statement_carries_no_notify_when_a_notifier_announces(
    clean_db: DatabaseSettings, notifier: CommitNotifier, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[str] = []
    real = psycopg.Connection.execute

    def recording(self: psycopg.Connection, query: object, *a: object, **kw: object) -> object:
        sent.append(str(query))
        return real(self, query, *a, **kw)  # type: ignore[arg-type]

    epochs = EpochSource(clean_db.control_dsn)
    with ConnectionPool(clean_db.resolver_dsn, min_size=1, max_size=1) as pool:
        write_one(pool, epochs, None, commit=True)  # the stream and its epoch exist
        monkeypatch.setattr(psycopg.Connection, "execute", recording)
        write_one(pool, epochs, notifier, commit=True)
        inside = [q for q in sent if "outbox" in q]
        sent.clear()
        write_one(pool, epochs, None, commit=True)
        without = [q for q in sent if "outbox" in q]
    epochs.close()
    assert inside and all("pg_notify" not in q for q in inside)
    assert without and any("pg_notify" in q for q in without)


def test_commits_in_a_gathering_pause_share_one_send_that_a_close_sends_at_once(
    clean_db: DatabaseSettings, listener: psycopg.Connection
) -> None:
    # A pause far longer than the test: what ends it here can only be the close.
    notifier = CommitNotifier(clean_db.resolver_dsn, "test-gathering", gather_seconds=60.0)
    notifier.start()
    try:
        notifier.announce(["s/1"])
        assert received(listener, DEADLINE_S, 1) == ["s/1"]  # nothing before it: sent at once
        notifier.announce(["s/2"])
        notifier.announce(["s/3"])
        assert received(listener, 0.5) == []  # held for the pause after the first send
    finally:
        notifier.close()
    # One notification for both, naming each stream on a line of its own.
    assert [sorted(p.split("\n")) for p in received(listener, DEADLINE_S, 1)] == [["s/2", "s/3"]]
    assert (notifier.sent, notifier.sends) == (3, 2)


def test_a_notifier_whose_connection_was_killed_connects_again(
    clean_db: DatabaseSettings, listener: psycopg.Connection, notifier: CommitNotifier
) -> None:
    notifier.announce(["s/1"])
    assert received(listener, DEADLINE_S, 1) == ["s/1"]
    with psycopg.connect(clean_db.resolver_owner_dsn, autocommit=True) as admin:
        killed = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = 'test-notifier'"
        ).fetchall()
    assert killed == [(True,)]
    deadline = time.monotonic() + DEADLINE_S
    got: list[str] = []
    while "s/2" not in got:
        assert time.monotonic() < deadline, "the notifier never announced again"
        notifier.announce(["s/2"])  # the first may be lost with the dead connection
        got += received(listener, 1.0)


def test_a_notifier_started_again_after_close_announces_again(
    clean_db: DatabaseSettings, listener: psycopg.Connection
) -> None:
    notifier = CommitNotifier(clean_db.resolver_dsn, "test-restarted")
    for round_ in range(2):
        notifier.start().start()  # a second start while running changes nothing
        notifier.announce([f"s/{round_}"])
        assert received(listener, DEADLINE_S, 1) == [f"s/{round_}"]
        notifier.close()


def test_the_notifier_does_not_wait_for_its_sends_to_reach_the_disk(
    clean_db: DatabaseSettings,
) -> None:
    """A send is a hint: its commit does not flush WAL (the decisions' commits do)."""
    notifier = CommitNotifier(clean_db.resolver_dsn, "test-notifier-async")
    with notifier.connect() as conn:
        row = conn.execute("SHOW synchronous_commit").fetchone()
        assert row is not None and row[0] == "off"
        assert conn.autocommit
    with psycopg.connect(clean_db.resolver_dsn) as writer:
        row = writer.execute("SHOW synchronous_commit").fetchone()
        assert row is not None and row[0] == "on"
