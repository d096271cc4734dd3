"""``gapless status``: per stream, what the resolver committed, published and retains,
and how far each product consumer has durably applied it."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg

from db.control import pauses
from db.control.epochs import rewound_now
from db.product import rebuilds, report_refusals
from db.resolver import evidence as evidence_sql
from db.settings import DatabaseSettings
from db.unit_of_work import Transaction
from infra.rebuild_text import progress_fields, progress_text
from processors.rebuild.progress import estimate
from producers.retention.report import StreamRetention, as_json, stream_report

Stream = tuple[str, str, int]

LEASE_WARNING_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class ConsumerState:
    consumer: str
    progress: int
    parked: int
    quarantined: int


@dataclass(frozen=True, slots=True)
class RebuildState:
    rebuild_id: str
    consumer: str
    phase: str
    attempt: int
    chunks_loaded: int
    chunks_total: int
    rows_loaded: int
    export_position: int | None
    error_code: str | None
    caught_up_position: int | None
    target_position: int | None
    cutover_pause_ms: float | None
    # ``infra.rebuild_text``: "loading, rows a / b (p %), r rows/s, ETA t", and the
    # same figures for --json (``progress_fraction``, ``rate_rows_per_s``, ``eta_s``).
    progress: str = ""
    progress_fraction: float = 0.0
    rate_rows_per_s: float | None = None
    eta_s: float | None = None


@dataclass(slots=True)
class StreamStatus:
    retention: StreamRetention | None
    stream: Stream
    consumers: list[ConsumerState] = field(default_factory=list)
    # Unfinished rebuilds, and ones that finished in the last day.
    rebuilds: list[RebuildState] = field(default_factory=list)


def _rebuilds(conn: psycopg.Connection) -> dict[Stream, list[RebuildState]]:
    found: dict[Stream, list[RebuildState]] = defaultdict(list)
    for row in conn.execute(
        "SELECT tenant_id, catalog_id, history_epoch, rebuild_id, consumer, phase, attempt,"
        " chunks_loaded, chunks_total, rows_loaded, export_position, error_code,"
        " caught_up_position, target_position, cutover_pause_ms FROM rebuild"
        " WHERE phase NOT IN ('done', 'failed', 'cancelled')"
        " OR updated_at > now() - interval '1 day'"
        " ORDER BY created_at"
    ).fetchall():
        t, c, e, *rest = row
        rebuild_id, *more = rest
        measured: dict[str, Any] = {}
        full = rebuilds.get(conn, rebuild_id)
        if full is not None:
            progress = estimate(full, datetime.now(UTC))
            fields = progress_fields(progress)
            measured = {
                "progress": progress_text(full, progress),
                "progress_fraction": fields["progress_fraction"],
                "rate_rows_per_s": fields["rate_rows_per_s"],
                "eta_s": fields["eta_s"],
            }
        found[(t, c, int(e))].append(RebuildState(str(rebuild_id), *more, **measured))
    return found


def consumer_states(conn: psycopg.Connection) -> dict[Stream, list[ConsumerState]]:
    """Per stream, each product consumer's applied position and its parked and open
    quarantined events (a product-database connection; the console shows them too)."""
    parked = {
        (q, t, c, int(e)): int(n)
        for q, t, c, e, n in conn.execute(
            "SELECT consumer, tenant_id, catalog_id, history_epoch, count(*) FROM parked_event"
            " GROUP BY 1, 2, 3, 4"
        ).fetchall()
    }
    quarantined = {
        (q, t, c, int(e)): int(n)
        for q, t, c, e, n in conn.execute(
            "SELECT consumer, tenant_id, catalog_id, history_epoch, count(*) FROM quarantine"
            " WHERE status = 'open' AND tenant_id IS NOT NULL GROUP BY 1, 2, 3, 4"
        ).fetchall()
    }
    states: dict[Stream, list[ConsumerState]] = defaultdict(list)
    for consumer, t, c, e, position in conn.execute(
        "SELECT consumer, tenant_id, catalog_id, history_epoch, position FROM stream_progress"
        " ORDER BY 2, 3, 4, 1"
    ).fetchall():
        stream = (t, c, int(e))
        states[stream].append(
            ConsumerState(
                consumer,
                int(position),
                parked.get((consumer, *stream), 0),
                quarantined.get((consumer, *stream), 0),
            )
        )
    return states


def collect(settings: DatabaseSettings) -> tuple[list[StreamStatus], int]:
    """Every stream either side knows, and the open quarantine entries with no stream
    (messages that never decoded)."""
    with psycopg.connect(settings.resolver_dsn) as conn:
        retention = {(r.tenant_id, r.catalog_id, r.history_epoch): r for r in stream_report(conn)}
    with psycopg.connect(settings.product_dsn) as conn:
        product = consumer_states(conn)
        rebuilds = _rebuilds(conn)
        row = conn.execute(
            "SELECT count(*) FROM quarantine WHERE status = 'open' AND tenant_id IS NULL"
        ).fetchone()
    streams = sorted(retention.keys() | product.keys() | rebuilds.keys())
    return (
        [
            StreamStatus(retention.get(s), s, product.get(s, []), rebuilds.get(s, []))
            for s in streams
        ],
        int(row[0]) if row else 0,
    )


def missing_evidence(settings: DatabaseSettings) -> int:
    """Artifacts a kept capture names that the last evidence sweep did not find in the
    bucket (``gapless evidence missing`` lists their captures)."""
    with psycopg.connect(settings.resolver_dsn) as conn:
        return evidence_sql.missing_count(Transaction(conn))


def to_json(status: StreamStatus) -> dict[str, Any]:
    t, c, e = status.stream
    return {
        "tenant_id": t,
        "catalog_id": c,
        "history_epoch": e,
        "retention": as_json(status.retention) if status.retention else None,
        "consumers": [
            {
                "consumer": s.consumer,
                "progress": s.progress,
                "lag": (status.retention.committed - s.progress) if status.retention else None,
                "parked": s.parked,
                "quarantined": s.quarantined,
            }
            for s in status.consumers
        ],
        "rebuilds": [asdict(r) for r in status.rebuilds],
    }


def seconds(value: float) -> str:
    """A duration for a person: ``0.4s``, ``12s``, ``3m05s``, ``2h07m``."""
    if value < 9.95:
        return f"{value:.1f}s"
    whole = round(value)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def _ages(waiting: float | None, unchanged: float | None) -> str:
    """A consumer's lag in time, when events wait for it."""
    if waiting is None:
        return ""
    stalled = f", unchanged for {seconds(unchanged)}" if unchanged is not None else ""
    return f" (oldest unapplied {seconds(waiting)} old{stalled})"


def lines(status: StreamStatus) -> list[str]:
    t, c, e = status.stream
    r = status.retention
    if r is None:
        out = [f"{t}/{c}@{e}  (unknown to the resolver)"]
        committed = None
    else:
        committed = r.committed
        unpublished = (
            f" (oldest unpublished {seconds(r.unpublished_age_s)} old)"
            if r.unpublished_age_s is not None
            else ""
        )
        out = [
            f"{t}/{c}@{e}  committed {r.committed}  published {r.published}{unpublished}"
            f"  pruned through {r.pruned_through}"
            + (f"  floor {r.floor}" if r.floor is not None else "  floor: nothing holds it")
        ]
        if r.blocker:
            out.append(f"    retention held: {r.blocker}")
        for lease in r.leases:
            note = "EXPIRED" if lease.expired else f"expires in {lease.seconds_to_expiry:.0f}s"
            warn = "  (near expiry)" if 0 < lease.seconds_to_expiry < LEASE_WARNING_SECONDS else ""
            out.append(
                f"    lease {lease.lease_id} ({lease.holder}) pinned {lease.pinned_position}"
                f"  {note}{warn}"
            )
        for reported in r.consumers:
            position = reported.reported_position
            note = "  (standing: holds the stream unseen)" if reported.standing else ""
            if reported.needs_rebuild_since is not None:
                note += (
                    f"  NEEDS REBUILD: its first report ({reported.refused_position}) is below"
                    f" pruned-through {r.pruned_through}; rebuild it or deregister it"
                )
            out.append(
                f"    reported by {reported.consumer_id}: "
                f"{position if position is not None else '-'}  lag {reported.lag}"
                f"{_ages(reported.waiting_age_s, reported.unchanged_s)}{note}"
            )
    for s in status.consumers:
        lag = f"  lag {committed - s.progress}" if committed is not None else ""
        out.append(
            f"    applied by {s.consumer}: {s.progress}{lag}  parked {s.parked}"
            f"  quarantined {s.quarantined}"
        )
    for b in status.rebuilds:
        error = f"  {b.error_code}" if b.error_code else ""
        caught = (
            f"  caught up to {b.caught_up_position} (H={b.target_position or '?'})"
            if b.caught_up_position is not None
            else ""
        )
        pause = f"  cutover paused {b.cutover_pause_ms:.1f} ms" if b.cutover_pause_ms else ""
        out.append(
            f"    rebuild {b.rebuild_id} of {b.consumer}: {b.progress or b.phase}"
            f"  attempt {b.attempt}"
            f"  loaded {b.chunks_loaded}/{b.chunks_total} chunks ({b.rows_loaded} rows)"
            f"{caught}{pause}{error}"
        )
    return out


def paused(settings: DatabaseSettings) -> list[dict[str, Any]]:
    """Open pauses (``db.control.pauses``), each with the live processes holding it or not."""
    with psycopg.connect(settings.control_dsn, autocommit=True) as conn:
        found = []
        for pause in pauses.open_pauses(conn):
            holders = pauses.holders(conn, pause.pause_id)
            found.append(
                {
                    "pause_id": str(pause.pause_id),
                    "tenant_id": pause.tenant_id,
                    "catalog_id": pause.catalog_id,
                    "paused_by": pause.paused_by,
                    "reason": pause.reason,
                    "paused_at": pause.paused_at.isoformat(),
                    "acknowledged_by": [h.instance_id for h in holders if h.acknowledged],
                    "not_acknowledged_by": [h.instance_id for h in holders if not h.acknowledged],
                }
            )
    return found


def rewound(settings: DatabaseSettings) -> list[dict[str, Any]]:
    """Streams flagged rewound (``db.control.epochs``): history that went back without a fence,
    each with the command that fixes it."""
    with psycopg.connect(settings.control_dsn, autocommit=True) as conn:
        return [
            {
                "tenant_id": r.tenant_id,
                "catalog_id": r.catalog_id,
                "history_epoch": r.history_epoch,
                "signal": r.signal,
                "detail": r.detail,
                "flagged_at": r.flagged_at.isoformat(),
                "fix": r.fix,
            }
            for r in rewound_now(conn)
        ]


def rewound_lines(flag: dict[str, Any]) -> list[str]:
    return [
        f"REWOUND {flag['tenant_id']}/{flag['catalog_id']}@{flag['history_epoch']} since"
        f" {flag['flagged_at']} ({flag['signal']}): its history went back without a fence;"
        " writes refused (HISTORY_REWOUND), deliveries quarantined (STREAM_REWOUND)",
        f"    {flag['detail']}",
        f"    fix: {flag['fix']}",
    ]


def pause_lines(pause: dict[str, Any]) -> list[str]:
    held, missing = pause["acknowledged_by"], pause["not_acknowledged_by"]
    lines = [
        f"PAUSED {pause['tenant_id']}/{pause['catalog_id']} since {pause['paused_at']}"
        f" by {pause['paused_by']}: {pause['reason']}",
        f"    held by {len(held)} of {len(held) + len(missing)} process(es)"
        + (f"; waiting for {', '.join(missing)}" if missing else ""),
    ]
    return lines


def report_refused(settings: DatabaseSettings) -> list[dict[str, Any]]:
    """Streams whose last progress report the resolver refused (``db.product.report_refusals``),
    each with what to do next. Their outbox is not pruned past what was acknowledged
    before; every other stream is reported as usual."""
    with psycopg.connect(settings.product_dsn) as conn:
        refusals = report_refusals.listed(conn)
    return [
        {
            "tenant_id": r.stream[0],
            "catalog_id": r.stream[1],
            "history_epoch": r.stream[2],
            "consumer": r.consumer,
            "position": r.position,
            "code": r.code,
            "message": r.message,
            "refused_at": r.refused_at.isoformat(),
            "next": next_step(r),
        }
        for r in refusals
    ]


def next_step(refusal: report_refusals.Refusal) -> str:
    """What an operator does about a refused report (docs/operations.md)."""
    tenant, catalog, epoch = refusal.stream
    where = f"--tenant {tenant} --catalog {catalog}"
    if refusal.code == "POSITION_BEYOND_COMMITTED":
        return (
            "the resolver's history went back below what was applied (a restore?): run"
            f" gapless fence-epoch {where} --epoch {epoch} --consumer {refusal.consumer}"
            ' --reason "..." --wait'
        )
    if refusal.code == "CONSUMER_NEEDS_REBUILD":
        return (
            "the resolver pruned events this consumer still needs: run gapless rebuild"
            f" {where} --consumer {refusal.consumer} --wait (or deregister it:"
            " gapless consumers deregister)"
        )
    return "the reporter sends it again every pass; the message says what the resolver wants"


def report_refused_lines(refusal: dict[str, Any]) -> list[str]:
    return [
        f"REPORT REFUSED {refusal['tenant_id']}/{refusal['catalog_id']}"
        f"@{refusal['history_epoch']} by {refusal['consumer']} at {refusal['position']}"
        f" since {refusal['refused_at']}: {refusal['code']}",
        f"    {refusal['message']}",
        f"    next: {refusal['next']}",
    ]
