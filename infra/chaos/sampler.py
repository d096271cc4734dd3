"""Durable progress, sampled throughout the campaign: it must never move backwards.

Every ``interval_s`` (0.5 s) one thread reads, for the run's tenants, each consumer's
durable progress per stream (product database) and each stream's published position
(resolver database), and the capture checkpoints of the run's jobs. A value below
the highest seen before for the same key is a regression, kept with both values.
Samples that fail (the database is restarting) are counted and skipped.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

import psycopg

Key = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Regression:
    what: str
    key: Key
    highest: int
    seen: int

    def __str__(self) -> str:
        return f"{self.what} {'/'.join(self.key)} went back from {self.highest} to {self.seen}"


@dataclass
class Monotone:
    """The highest value seen per key, and every time one went below it."""

    highest: dict[tuple[str, Key], int] = field(default_factory=dict)
    regressions: list[Regression] = field(default_factory=list)

    def observe(self, what: str, rows: Iterable[tuple[Key, int]]) -> None:
        for key, value in rows:
            before = self.highest.get((what, key))
            if before is not None and value < before:
                self.regressions.append(Regression(what, key, before, value))
            else:
                self.highest[(what, key)] = value


class Sampler:
    def __init__(
        self, resolver_dsn: str, product_dsn: str, tenant_like: str, interval_s: float = 0.5
    ) -> None:
        self._resolver = resolver_dsn
        self._product = product_dsn
        self._like = tenant_like
        self._interval = interval_s
        self.monotone = Monotone()
        self.samples = 0
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="progress sampler", daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def sample(self) -> None:
        with psycopg.connect(self._product, autocommit=True, connect_timeout=3) as conn:
            progress = conn.execute(
                "SELECT consumer, tenant_id, catalog_id, history_epoch::text, position"
                " FROM stream_progress WHERE tenant_id LIKE %s",
                (self._like,),
            ).fetchall()
        with psycopg.connect(self._resolver, autocommit=True, connect_timeout=3) as conn:
            published = conn.execute(
                "SELECT tenant_id, catalog_id, history_epoch::text, published_position"
                " FROM stream_publication WHERE tenant_id LIKE %s",
                (self._like,),
            ).fetchall()
            checkpoints = conn.execute(
                "SELECT c.job_id::text, c.next_item FROM capture_checkpoint c"
                " JOIN intake_job j USING (job_id) WHERE j.tenant_id LIKE %s",
                (self._like,),
            ).fetchall()
        self.monotone.observe("progress", ((tuple(r[:4]), int(r[4])) for r in progress))
        self.monotone.observe("published", ((tuple(r[:3]), int(r[3])) for r in published))
        self.monotone.observe("checkpoint", (((r[0],), int(r[1])) for r in checkpoints))
        self.samples += 1

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.sample()
            except psycopg.Error:
                self.failed += 1
