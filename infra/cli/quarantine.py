"""Poison messages of the product agents: list, retry, skip."""

from __future__ import annotations

import sys

import click

from infra.cli.output import actor, echo, emit, guarded
from infra.config import load


@click.group()
def quarantine() -> None:
    """Inspect and repair quarantined messages (list, retry, skip)."""


@quarantine.command("list")
@click.option(
    "--status",
    type=click.Choice(["open", "retried", "skipped", "superseded", "all"]),
    default="open",
    show_default=True,
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per entry.")
def quarantine_list(status: str, as_json: bool) -> None:
    """List quarantined messages with their origin and classified error."""
    import psycopg

    from processors.applier.repair import list_entries
    from processors.settings import AgentSettings

    settings = guarded(lambda: load(AgentSettings))
    with psycopg.connect(settings.product_dsn) as conn:
        entries = list_entries(conn, None if status == "all" else status)
    for e in entries:
        stream = "/".join(map(str, e.stream)) if e.stream else "-"
        emit(
            as_json,
            {
                "id": e.id,
                "consumer": e.consumer,
                "topic": e.topic,
                "partition": e.partition,
                "offset": e.offset,
                "event_id": str(e.event_id) if e.event_id else None,
                "stream": stream if e.stream else None,
                "position": e.position,
                "error_code": e.error_code,
                "error_detail": e.error_detail,
                "status": e.status,
                "created_at": e.created_at.isoformat(),
                "resolution": e.resolution,
            },
            f"#{e.id:<5} {e.status:<8} {e.error_code:<22} {stream}#{e.position or '-'}"
            f"  ({e.topic} p{e.partition} o{e.offset})  {e.error_detail[:80]}",
        )
    if not entries and not as_json:
        echo(f"no {status} entries")


@quarantine.command("retry")
@click.argument("entry_ids", nargs=-1, type=int, required=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per entry.")
def quarantine_retry(entry_ids: tuple[int, ...], as_json: bool) -> None:
    """Apply quarantined messages again (after fixing what made them fail).

    Exit 1 if any still fails (it stays open) or was refused."""
    from db.control.epochs import EpochSource
    from processors.applier.batch import Applier
    from processors.applier.exceptions import QuarantineRepairError
    from processors.applier.repair import retry
    from processors.settings import AgentSettings
    from schemas.registry_codec import codec_for

    settings = guarded(lambda: load(AgentSettings))
    applier = Applier(
        settings.product_dsn,
        EpochSource(settings.control_dsn),
        codec_for(settings),
        settings.agents_consumer,
    )
    failed = 0
    for entry_id in entry_ids:
        try:
            ok = retry(settings.product_dsn, applier, entry_id, actor())
        except QuarantineRepairError as exc:
            if as_json:
                emit(True, {"id": entry_id, "error": exc.code, "message": str(exc)}, "")
            else:
                echo(f"#{entry_id}: {exc.code}: {exc}")
            failed += 1
            continue
        if as_json:
            emit(True, {"id": entry_id, "status": "retried" if ok else "open"}, "")
        else:
            echo(f"#{entry_id}: {'applied, marked retried' if ok else 'still failing, left open'}")
        failed += 0 if ok else 1
    applier.close()
    sys.exit(1 if failed else 0)


@quarantine.command("skip")
@click.argument("entry_id", type=int)
@click.option("--reason", required=True, help="Why it is safe to give this event up (audited).")
@click.option("--json", "as_json", is_flag=True, help="The outcome as one JSON object.")
def quarantine_skip(entry_id: int, reason: str, as_json: bool) -> None:
    """Give up a quarantined event with an audited reason, so progress can pass it.

    Events parked on it become quarantine entries of their own (DEPENDENCY_SKIPPED),
    each with its own retry and skip. A message that never decoded and whose position
    is unknown gives up its bytes: the gap closer records the resolver's copy of them
    skipped when it fetches that position."""
    from processors.applier.exceptions import QuarantineRepairError
    from processors.applier.repair import skip_entry
    from processors.settings import AgentSettings
    from schemas.registry_codec import codec_for

    settings = guarded(lambda: load(AgentSettings))
    try:
        done = skip_entry(settings.product_dsn, entry_id, reason, actor(), codec_for(settings))
    except QuarantineRepairError as exc:
        if as_json:
            emit(True, {"id": entry_id, "error": exc.code, "message": str(exc)}, "")
        else:
            echo(f"#{entry_id}: {exc.code}: {exc}")
        sys.exit(2)
    aside = ", ".join(f"#{i}" for i in done.set_aside.values())
    if as_json:
        emit(
            True,
            {
                "id": entry_id,
                "status": "skipped",
                "progress": done.progress,
                "set_aside": {str(k): v for k, v in done.set_aside.items()},
            },
            "",
        )
        return
    echo(
        f"#{entry_id}: skipped"
        + (f"; stream progress now {done.progress}" if done.progress is not None else "")
        + (f"; set aside what waited on it as entries {aside}" if aside else "")
    )
