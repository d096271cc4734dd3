"""What ``gapless rebuild status`` and ``gapless rebuild --wait`` show of a rebuild:
one line of text, or one JSON object, with its progress
(``processors.rebuild.progress``): ``loading, rows 120,000 / 478,000 (25 %),
9,800 rows/s, ETA 37 s``. The percentage is the share of the whole work (the rows
weighted by their kind's measured cost, then the catch-up), the same figure as
``progress_fraction`` and ``gapless_rebuild_progress_ratio``."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

import psycopg

from db.product.rebuilds import RebuildRow
from db.resolver.exports import get_export
from db.resolver.retention import get_lease
from processors.rebuild.progress import Progress, estimate

_BEFORE_LOAD = ("requested", "leased", "exporting")


def duration(seconds: float) -> str:
    """``37 s``, ``4 min 10 s``, ``2 h 5 min``."""
    s = round(seconds)
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def resolver_side(
    row: RebuildRow, connect: Callable[[], AbstractContextManager[psycopg.Connection[Any]]]
) -> dict[str, Any]:
    """What the resolver knows of the rebuild: rows its export wrote, when its lease
    expires (best effort: the resolver database may be elsewhere, or away), read on a
    connection ``connect`` gives (``gapless rebuild --wait`` and the console)."""
    extra: dict[str, Any] = {}
    try:
        with connect() as conn:
            if row.export_id is not None:
                export = get_export(conn, row.export_id)
                if export is not None:
                    extra["rows_exported"] = export.records
            if row.lease_id is not None:
                lease = get_lease(conn, row.lease_id)
                if lease is not None:
                    released = lease.released_at is not None
                    extra["lease_expires_at"] = (
                        None if released else lease.expires_at.isoformat(timespec="seconds")
                    )
    except psycopg.Error:
        pass
    return extra


def progress_text(row: RebuildRow, progress: Progress) -> str:
    """``phase, rows a / b (p %), r rows/s, ETA t``: the parts known, the phase alone
    before the load."""
    parts = [row.phase]
    if row.phase not in _BEFORE_LOAD and row.rows_total is not None:
        parts.append(
            f"rows {row.rows_loaded:,} / {row.rows_total:,} ({progress.fraction * 100:.0f} %)"
        )
    if progress.rate_rows_s is not None:
        parts.append(f"{progress.rate_rows_s:,.0f} {progress.rate_of}/s")
    if progress.eta_s is not None and row.phase not in ("done", "failed", "cancelled"):
        parts.append(f"ETA {duration(progress.eta_s)}")
    return ", ".join(parts)


def progress_fields(progress: Progress) -> dict[str, Any]:
    return {
        "progress_fraction": round(progress.fraction, 4),
        "rate_rows_per_s": None if progress.rate_rows_s is None else round(progress.rate_rows_s, 1),
        "rate_of": progress.rate_of,
        "eta_s": None if progress.eta_s is None else round(progress.eta_s, 1),
    }


def record(row: RebuildRow, now: datetime, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The rebuild as one JSON object (``--json``)."""
    return {
        "rebuild_id": str(row.rebuild_id),
        "stream": str(row.stream),
        "consumer": row.consumer,
        "phase": row.phase,
        "attempt": row.attempt,
        "generation": row.generation,
        "export_position": row.export_position,
        "chunks_loaded": row.chunks_loaded,
        "chunks_total": row.chunks_total,
        "rows_loaded": row.rows_loaded,
        # an earlier attempt's until this one's load reads its export
        "rows_total": None if row.phase in _BEFORE_LOAD else row.rows_total,
        "rows_by_kind": {} if row.phase in _BEFORE_LOAD else row.rows_by_kind,
        **progress_fields(estimate(row, now)),
        "target_position": row.target_position,
        "caught_up_position": row.caught_up_position,
        "previous_generation": row.previous_generation,
        "cutover_pause_ms": row.cutover_pause_ms,
        "timings": row.timings,
        "requested_by": row.requested_by,
        "reason": row.reason,
        "error_code": row.error_code,
        "error_message": row.error_message,
        "created_at": row.created_at.isoformat(),
        "updated_at": row.updated_at.isoformat(),
        "finished_at": row.finished_at.isoformat() if row.finished_at else None,
        **(extra or {}),
    }


def _caught_up(row: RebuildRow) -> str:
    if row.export_position is None or row.caught_up_position is None:
        return ""
    target = row.target_position if row.target_position is not None else "?"
    done = row.caught_up_position - row.export_position
    return f"  caught up {done:,} (to {row.caught_up_position} of H={target})"


def line(row: RebuildRow, now: datetime, extra: dict[str, Any] | None = None) -> str:
    """The rebuild as one line of text."""
    extra = extra or {}
    error = f"  {row.error_code}: {row.error_message}" if row.error_code else ""
    exported = f"  exported {extra['rows_exported']:,} rows" if "rows_exported" in extra else ""
    lease = f"  lease until {extra['lease_expires_at']}" if extra.get("lease_expires_at") else ""
    pause = (
        f"  paused the live applier {row.cutover_pause_ms:.1f} ms"
        if row.cutover_pause_ms is not None
        else ""
    )
    return (
        f"{row.rebuild_id}  {row.stream!s:<28} {progress_text(row, estimate(row, now))}"
        f"  attempt {row.attempt}"
        f"  W={row.export_position if row.export_position is not None else '-'}{exported}"
        f"  chunks {row.chunks_loaded}/{row.chunks_total}"
        f"{_caught_up(row)}{pause}{lease}{error}"
    )
