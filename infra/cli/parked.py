"""Parked events of the product agents: list (with what each waits on), retry, skip."""

from __future__ import annotations

import re
import sys
import uuid
from datetime import timedelta
from typing import Any

import click

from infra.cli.output import actor, echo, emit, guarded
from infra.config import load

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


class Duration(click.ParamType):
    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: Any) -> timedelta:
        if isinstance(value, timedelta):
            return value
        match = _DURATION.match(str(value).strip())
        if match is None:
            self.fail(f"{value!r} is not a duration such as 90s, 10m, 2h or 1d", param, ctx)
        return timedelta(seconds=float(match[1]) * _UNIT[match[2]])


class StreamParam(click.ParamType):
    name = "tenant/catalog/epoch"

    def convert(self, value: Any, param: click.Parameter | None, ctx: Any) -> tuple[str, str, int]:
        parts = str(value).split("/")
        if len(parts) != 3 or not all(parts) or not parts[2].isdigit():
            self.fail(f"{value!r} is not a stream such as tenant/catalog/1", param, ctx)
        return (parts[0], parts[1], int(parts[2]))


class EventId(click.ParamType):
    name = "event_id"

    def convert(self, value: Any, param: click.Parameter | None, ctx: Any) -> uuid.UUID:
        try:
            return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
        except ValueError:
            self.fail(
                f"{value!r} is not an event id (a UUID, see `gapless parked list`)", param, ctx
            )


def _refused(as_json: bool, event_id: uuid.UUID | None, exc: Any) -> None:
    """A refusal on stdout as JSON (``--json``), else its code and message on stderr."""
    if as_json:
        emit(
            True,
            {
                "event_id": str(event_id) if event_id else None,
                "error": exc.code,
                "message": str(exc),
            },
            "",
        )
    else:
        echo(f"{event_id or 'error'}: {exc.code}: {exc}")


@click.group()
def parked() -> None:
    """Inspect and repair parked events (list, retry, skip).

    A parked event waits for a dependency to be applied and holds its stream's
    progress (and the resolver's retention floor) meanwhile.
    """


@parked.command("list")
@click.option("--stream", type=StreamParam(), help="Only this stream (tenant/catalog/epoch).")
@click.option(
    "--older-than", type=Duration(), help="Only events parked longer than this (90s, 10m, 2h, 1d)."
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per parked event.")
def parked_list(
    stream: tuple[str, str, int] | None, older_than: timedelta | None, as_json: bool
) -> None:
    """List parked events, oldest position first, with what each one waits on."""
    import psycopg

    from processors.applier.parked_repair import list_parked
    from processors.settings import AgentSettings

    settings = guarded(lambda: load(AgentSettings))
    with psycopg.connect(settings.product_dsn) as conn:
        events = list_parked(conn, settings.agents_consumer, stream, older_than)
    for p in events:
        where = "/".join(map(str, p.stream))
        origin = f"{p.topic} p{p.partition} o{p.offset}" if p.topic is not None else "-"
        emit(
            as_json,
            {
                "event_id": str(p.event_id),
                "stream": where,
                "position": p.position,
                "event_type": p.event_type,
                "parked_at": p.parked_at.isoformat(),
                "origin": None
                if p.topic is None
                else {"topic": p.topic, "partition": p.partition, "offset": p.offset},
                "waits_on": [
                    {
                        "aggregate_type": d.aggregate_type,
                        "aggregate_id": d.aggregate_id,
                        "revision": d.revision,
                        "applied_revision": d.applied,
                    }
                    for d in p.waits_on
                ],
            },
            f"{p.event_id}  {where}#{p.position}  {p.event_type:<24} parked"
            f" {p.parked_at:%Y-%m-%d %H:%M:%S}  ({origin})  waits on:"
            f" {'; '.join(map(str, p.waits_on)) or 'nothing recorded'}",
        )
    if not events and not as_json:
        echo("no parked events")


@parked.command("retry")
@click.argument("event_ids", nargs=-1, type=EventId(), required=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per event.")
def parked_retry(event_ids: tuple[uuid.UUID, ...], as_json: bool) -> None:
    """Look at parked events again: each one whose dependencies are now applied is
    applied (with whatever it releases in turn). Exit 1 if any still waits."""
    from db.control.epochs import EpochSource
    from processors.applier.batch import Applier
    from processors.applier.exceptions import ParkedRepairError
    from processors.applier.parked_repair import retry
    from processors.settings import AgentSettings
    from schemas.registry_codec import codec_for

    settings = guarded(lambda: load(AgentSettings))
    applier = Applier(
        settings.product_dsn,
        EpochSource(settings.control_dsn),
        codec_for(settings),
        settings.agents_consumer,
    )
    try:
        outcomes = retry(applier, list(dict.fromkeys(event_ids)))
    except ParkedRepairError as exc:
        _refused(as_json, None, exc)
        sys.exit(2)
    finally:
        applier.close()
    waiting = 0
    for event_id, outcome in outcomes.items():
        waiting += outcome is None
        emit(
            as_json,
            {"event_id": str(event_id), "outcome": outcome or "parked"},
            f"{event_id}: "
            + (f"released, {outcome}" if outcome else "still waiting (see `gapless parked list`)"),
        )
    sys.exit(1 if waiting else 0)


@parked.command("skip")
@click.argument("event_id", type=EventId())
@click.option("--reason", required=True, help="Why it is safe to give this event up (audited).")
@click.option("--json", "as_json", is_flag=True, help="The outcome as one JSON object.")
def parked_skip(event_id: uuid.UUID, reason: str, as_json: bool) -> None:
    """Give up a parked event with an audited reason, so progress can pass it.

    It is recorded as a skipped quarantine entry (`gapless quarantine list --status
    skipped`); events that were parked on it become quarantine entries of their own.
    """
    from processors.applier.exceptions import ParkedRepairError, QuarantineRepairError
    from processors.applier.parked_repair import skip
    from processors.settings import AgentSettings
    from schemas.registry_codec import codec_for

    settings = guarded(lambda: load(AgentSettings))
    try:
        entry_id, done = skip(
            settings.product_dsn,
            settings.agents_consumer,
            event_id,
            reason,
            actor(),
            codec_for(settings),
        )
    except (ParkedRepairError, QuarantineRepairError) as exc:
        _refused(as_json, event_id, exc)
        sys.exit(2)
    aside = ", ".join(f"#{i}" for i in done.set_aside.values())
    emit(
        as_json,
        {
            "event_id": str(event_id),
            "entry": entry_id,
            "progress": done.progress,
            "set_aside": {str(k): v for k, v in done.set_aside.items()},
        },
        f"{event_id}: skipped as quarantine entry #{entry_id}; stream progress now"
        f" {done.progress}"
        + (f"; set aside what waited on it as entries {aside}" if aside else ""),
    )
