"""A live write load during the rebuild, through the real writer.

One thread records a rule decision every ``EVENTS_PER_DECISION / events_per_s``
seconds with ``record_decision``: one new item (``<prefix>-<n>``) and a new revision
of a random seeded item that was not split (a split item takes no new revision),
three events with the decision's own, so the rebuild's catch-up and cutover have
real work: new aggregates and revisions above the exported ones. A decision that
falls behind its schedule is written at once (the rate is kept on average, never
skipped). A crash leaves committed decisions, each whole, and nothing else.
"""

from __future__ import annotations

import random
import threading
import time

from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.settings import DatabaseSettings
from db.unit_of_work import UnitOfWork
from infra.bench.rebuild_seed import COLOURS, item_class, item_id, was_split
from infra.bench.writer import EVIDENCE, change, users_codec
from producers.resolver.catalog_items import ItemChange
from producers.resolver.decisions import Decision, record_decision

EVENTS_PER_DECISION = 3


class LiveWriter:
    def __init__(
        self,
        databases: DatabaseSettings,
        tenant: str,
        catalog: str,
        items: int,
        events_per_s: float,
        prefix: str = "live",
        seed: int = 7,
    ) -> None:
        self._pool = ConnectionPool(databases.resolver_dsn, min_size=1, max_size=1, open=True)
        self._epochs = EpochSource(databases.control_dsn)
        self._tenant = tenant
        self._catalog = catalog
        self._items = items
        self._interval = EVENTS_PER_DECISION / events_per_s
        self._prefix = prefix
        self._seed = seed
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="live-writer", daemon=True)
        self._lock = threading.Lock()
        self._events = 0
        self.error: BaseException | None = None
        self._closed = False

    @property
    def events(self) -> int:
        """Events committed so far."""
        with self._lock:
            return self._events

    def start(self) -> None:
        self._thread.start()

    def require_running(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"the live writer failed: {self.error!r}") from self.error

    def stop(self) -> None:
        """Stop writing; raises what the writer failed with, if it failed."""
        self.close()
        self.require_running()

    def close(self) -> None:
        """Stop writing and close the connections (again: nothing)."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=30)
        self._pool.close()
        self._epochs.close()

    def _decision(self, n: int, rng: random.Random) -> Decision:
        g = rng.randint(1, self._items)
        if was_split(g):
            g = g - 1 if g > 1 else g + 1
        update = ItemChange(
            self._tenant,
            self._catalog,
            item_id(g),
            item_class(g),
            f"Seeded item {g}, changed by decision {n}",
            attributes={"colour": rng.choice(COLOURS), "size": str(36 + g % 12)},
        )
        return Decision(
            self._tenant,
            self._catalog,
            "update",
            "rule:bench-live",
            "a new item and a changed one",
            EVIDENCE,
            facts=(change(self._tenant, f"{self._prefix}-{n}"), update),
            actor_kind="rule",
        )

    def _run(self) -> None:
        rng = random.Random(self._seed)
        due = time.monotonic()
        n = 0
        try:
            while not self._stop.is_set():
                pause = due - time.monotonic()
                if pause > 0 and self._stop.wait(pause):
                    return
                with UnitOfWork(self._pool, self._epochs, users_codec()) as uow:
                    record_decision(uow, self._decision(n, rng))
                    written = len(uow.envelopes)
                with self._lock:
                    self._events += written
                due += self._interval
                n += 1
        except BaseException as exc:  # re-raised by require_running / stop
            self.error = exc
