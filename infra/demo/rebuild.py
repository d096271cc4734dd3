"""The demo's shadow rebuild: one catalog rebuilt under the live workload.

An operator's request goes on the control topic while the writers commit
(``request``); the agents carry it out through every phase to the cutover, which the
demo waits for (``wait``) and then checks (``summary``): the rebuild is done, the
live consumer serves the catalog from the rebuilt generation, and that generation
equals the accepted state row by row (the comparison reads each catalog from the
generation it is served from).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg

from db.product import rebuilds as sql
from db.product.rebuilds import RebuildRow
from db.settings import DatabaseSettings
from infra.config import load
from infra.control import publish, rebuild_command
from infra.demo.projection_check import Comparison, serving_generations
from schemas.control import ControlCommand
from schemas.settings import KafkaSettings

LIVE_CONSUMER = "product-applier"
"""The agents' default consumer, the one the demo's agents run as."""

Echo = Callable[[str], None]


class DemoRebuild:
    def __init__(self, settings: DatabaseSettings, stream: tuple[str, str], echo: Echo) -> None:
        self._settings = settings
        self.tenant, self.catalog = stream
        self._echo = echo
        self.rebuild_id: uuid.UUID | None = None
        self._lock = threading.Lock()
        self.requested = False
        self._command: ControlCommand | None = None

    def request(self) -> None:
        """Ask once (the writer threads all report progress; the first one asks).

        Asked again after a failed send (``requested`` reset), it sends the same
        command: a send reported failed may still have been delivered (the producer
        goes on retrying after its flush gives up), and the agents take a command id
        they have seen as a redelivery, so there is one rebuild, the one followed."""
        with self._lock:
            if self.requested:
                return
            self.requested = True
            if self._command is None:
                self._command = rebuild_command(
                    self.tenant, self.catalog, "demo", "the demo's rebuild drill"
                )
            command = self._command
        kafka = load(KafkaSettings)
        publish(kafka.client_config(), command, kafka.control_topic)
        self.rebuild_id = command.command_id
        self._echo(f"  rebuild of {self.tenant}/{self.catalog} requested: {self.rebuild_id}")

    def _row(self) -> RebuildRow | None:
        assert self.rebuild_id is not None
        with psycopg.connect(self._settings.product_dsn) as conn:
            return sql.get(conn, self.rebuild_id)

    def wait(self, timeout: float) -> RebuildRow | None:
        """Follow the rebuild until it ends (or ``timeout``); its last row."""
        if self.rebuild_id is None:
            return None
        deadline = time.monotonic() + timeout
        phase = ""
        while True:
            row = self._row()
            if row is not None and row.phase != phase:
                phase = row.phase
                self._echo(f"  rebuild: {phase} (attempt {row.attempt})")
            if row is not None and row.phase in ("done", "failed", "cancelled"):
                return row
            if time.monotonic() >= deadline:
                return row
            time.sleep(0.2)

    def summary(self, row: RebuildRow | None, comparison: Comparison) -> dict[str, Any]:
        if row is None:
            return {"phase": "not recorded", "cutover_check": False}
        served = serving_generations(self._settings.product_dsn, LIVE_CONSUMER, self.tenant)
        serving = served.get((self.tenant, self.catalog))
        mismatched = [
            d for d in comparison.differences if (d.key[0], d.key[1]) == (self.tenant, self.catalog)
        ]
        took = (row.finished_at - row.created_at).total_seconds() if row.finished_at else None
        return {
            "stream": str(row.stream),
            "id": str(row.rebuild_id),
            "phase": row.phase,
            "attempt": row.attempt,
            "generation": row.generation,
            "serving_generation": serving,
            "export_position": row.export_position,
            "target_position": row.target_position,
            "rows_loaded": row.rows_loaded,
            "seconds_by_phase": {k: round(v, 3) for k, v in row.timings.items()},
            "cutover_pause_ms": (
                round(row.cutover_pause_ms, 2) if row.cutover_pause_ms is not None else None
            ),
            "seconds": round(took, 2) if took is not None else None,
            "error": f"{row.error_code}: {row.error_message}" if row.error_code else None,
            "cutover_check": row.phase == "done"
            and serving == row.generation
            and row.generation is not None
            and not mismatched,
        }
