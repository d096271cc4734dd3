"""Following one rebuild from the bench: its row polled every ``POLL_S`` until
``done``, each row handed to observers (peak memory, the ETA's sample, the killer),
progress on stderr. Reads only; a rebuild that fails, or takes longer than its
timeout, fails the bench."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import psycopg

from db.product import rebuilds
from db.product.rebuilds import RebuildRow
from db.resolver.exports import get_export
from infra.bench.memory import peak_rss_mb, reset_peak, rss_mb
from infra.bench.rebuild_report import Memory
from infra.bench.sandbox import Echo, Sandbox
from infra.processes import Deployed

POLL_S = 0.1
ECHO_EVERY_S = 2.0

Observer = Callable[[RebuildRow], None]


def rebuild_timeout(items: int) -> float:
    return 300.0 + items / 1000


class Follower:
    """The rebuild row as the bench sees it, polled; progress on stderr."""

    def __init__(self, box: Sandbox, rebuild_id: uuid.UUID, echo: Echo) -> None:
        self._box = box
        self._id = rebuild_id
        self._echo = echo
        self._phase: str | None = None
        self._echoed = 0.0

    def row(self, conn: psycopg.Connection) -> RebuildRow | None:
        row = rebuilds.get(conn, self._id)
        if row is None:
            return None
        now = time.monotonic()
        if row.phase != self._phase or now - self._echoed >= ECHO_EVERY_S:
            self._echo(
                f"rebuild: {row.phase:<12} attempt {row.attempt}"
                f"  exported {self._exported(row)}  loaded {row.chunks_loaded}/"
                f"{row.chunks_total} chunks ({row.rows_loaded:,} rows)"
                + (f"  {row.error_code}: {row.error_message}" if row.error_code else "")
            )
            self._phase, self._echoed = row.phase, now
        return row

    def _exported(self, row: RebuildRow) -> str:
        if row.export_id is None:
            return "-"
        with psycopg.connect(self._box.databases.resolver_dsn, autocommit=True) as conn:
            export = get_export(conn, row.export_id)
        return "-" if export is None else f"{export.records:,} rows ({export.status})"


def follow(
    box: Sandbox,
    rebuild_id: uuid.UUID,
    items: int,
    alive: Callable[[], None],
    echo: Echo,
    observers: Sequence[Observer] = (),
) -> RebuildRow:
    """Poll the (published) request's row until ``done``; each row to ``observers``,
    and ``alive`` between polls (it raises if a process or the writer died)."""
    follower = Follower(box, rebuild_id, echo)
    start = time.monotonic()
    deadline = start + rebuild_timeout(items)
    with psycopg.connect(box.databases.product_dsn, autocommit=True) as conn:
        while True:
            row = follower.row(conn)
            if row is not None:
                for observe in observers:
                    observe(row)
                if row.phase == "done":
                    return row
                if row.phase in ("failed", "cancelled"):
                    raise RuntimeError(
                        f"rebuild {row.rebuild_id} {row.phase}: {row.error_code}:"
                        f" {row.error_message}"
                    )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"rebuild {rebuild_id} not done after {time.monotonic() - start:.0f}s"
                    f" (phase {row.phase if row else 'not recorded'})"
                )
            alive()
            time.sleep(POLL_S)


@dataclass
class Peaks:
    """Resident memory of the API and the agents workers: before the request, and the
    peak through the load (read once the rebuild is past it, or at the end)."""

    api: Deployed
    workers: Sequence[Deployed]
    echo: Echo
    _before: tuple[float, float] = (0.0, 0.0)
    _peaks: tuple[float, float] | None = None

    def start(self) -> None:
        """Before the request: each process's resident MB, and its peak reset."""
        self._before = (rss_mb(self.api.pid), max(rss_mb(w.pid) for w in self.workers))
        for p in (self.api, *self.workers):
            if not reset_peak(p.pid):
                self.echo(
                    f"rebuild: could not reset {p.name}'s peak RSS; its peak counts from its start"
                )

    def _read(self) -> tuple[float, float]:
        return peak_rss_mb(self.api.pid), max(peak_rss_mb(w.pid) for w in self.workers)

    def observe(self, row: RebuildRow) -> None:
        if self._peaks is None and row.phase in ("catching_up", "cutting_over", "done"):
            self._peaks = self._read()

    def memory(self) -> tuple[Memory, Memory]:
        """(the API's, the agents workers' largest)."""
        peaks = self._peaks or self._read()
        return (
            Memory(self._before[0], max(peaks[0], self._before[0])),
            Memory(self._before[1], max(peaks[1], self._before[1])),
        )
