"""The campaign's epoch fence of its fence stream (``infra.fence``), asked for at 55 %
of the time and run under the faults until it is complete."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from typing import Any

import psycopg

from infra.chaos.fleet import Echo
from infra.chaos.roster import CONSUMER


class Fence:
    """The epoch fence of the fence stream, in a thread of its own, run again after
    any failure (the procedure is idempotent) until it is complete: for up to twice
    ``timeout_s``, each attempt following its rebuild for up to ``timeout_s``."""

    def __init__(
        self,
        databases: Any,
        kafka: Any,
        stream: tuple[str, str],
        echo: Echo,
        timeout_s: float,
    ) -> None:
        self._databases = databases
        self._kafka = kafka
        self.tenant, self.catalog = stream
        self._echo = echo
        self._timeout_s = timeout_s
        self.done = False
        self.attempts = 0
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="fence", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from infra.fence import fence_epoch

        deadline = time.monotonic() + self._timeout_s * 2
        while not self.done and time.monotonic() < deadline:
            self.attempts += 1
            try:
                report = fence_epoch(
                    self._databases,
                    self._kafka,
                    CONSUMER,
                    self.tenant,
                    self.catalog,
                    1,
                    "operator:chaos",
                    "the campaign's fence under faults",
                    lambda line: self._echo(f"  fence: {line}"),
                    follow=self._follow,
                    pause_timeout_s=30.0,
                )
            except Exception as exc:  # the procedure is idempotent: go again
                self._echo(
                    f"  fence: attempt {self.attempts} stopped ({type(exc).__name__}: {exc}); again"
                )
                time.sleep(2.0)
                continue
            resumed = report.resumed is not None or (
                report.paused is not None and report.paused.state == "resumed"
            )
            self.done = report.rebuild_phase == "done" and resumed
            if not self.done:
                time.sleep(2.0)

    def _follow(self, rebuild_id: uuid.UUID) -> str | None:
        from db.product import rebuilds

        deadline = time.monotonic() + self._timeout_s
        phase: str | None = None
        while time.monotonic() < deadline:
            with contextlib.suppress(psycopg.Error):
                with psycopg.connect(self._databases.product_dsn, connect_timeout=3) as conn:
                    row = rebuilds.get(conn, rebuild_id)
                phase = row.phase if row is not None else None
                if phase in ("done", "failed", "cancelled"):
                    return phase
            time.sleep(0.5)
        return phase
