"""Pausing and resuming a catalog's processing (``gapless pause``, ``gapless resume``)."""

from __future__ import annotations

import click

from infra.cli.output import actor, echo, emit, fail, guarded
from infra.config import load

_TIMEOUT = click.option(
    "--timeout",
    type=float,
    default=60.0,
    show_default=True,
    help="Seconds to wait for every live process to acknowledge.",
)


@click.command()
@click.option("--tenant", required=True, help="The tenant of the catalog.")
@click.option("--catalog", required=True, help="The catalog to pause.")
@click.option("--reason", required=True, help="Why (audited with your name).")
@_TIMEOUT
@click.option("--json", "as_json", is_flag=True, help="The outcome as one JSON object.")
def pause(tenant: str, catalog: str, reason: str, timeout: float, as_json: bool) -> None:
    """Pause a catalog's processing: writers refuse (STREAM_PAUSED), the relay and the
    agents hold its events, the read API answers STREAM_BEING_RESTORED. Waits until
    every live process acknowledged; exit 1 when some did not (the pause stays).
    Safe to run again."""
    from db.settings import DatabaseSettings
    from infra.control import ControlTopicUnavailable
    from infra.pause import PauseNotAcknowledged, pause_catalog
    from schemas.settings import KafkaSettings

    databases = guarded(lambda: load(DatabaseSettings))
    kafka = guarded(lambda: load(KafkaSettings))
    try:
        report = pause_catalog(
            databases, kafka, tenant, catalog, actor(), reason, echo, timeout_s=timeout
        )
    except ControlTopicUnavailable as exc:
        fail(exc)
    except PauseNotAcknowledged as exc:
        click.secho(f"error: {exc.code}: {exc}", fg="red", err=True)
        raise SystemExit(1) from exc
    emit(as_json, report.as_dict(), f"{tenant}/{catalog} {report.state}: {report.pause_id}")


@click.command()
@click.option("--tenant", required=True, help="The tenant of the catalog.")
@click.option("--catalog", required=True, help="The catalog to resume.")
@_TIMEOUT
@click.option("--json", "as_json", is_flag=True, help="The outcome as one JSON object.")
def resume(tenant: str, catalog: str, timeout: float, as_json: bool) -> None:
    """Resume a paused catalog; waits until every live process let the pause go.
    Resuming a catalog that is not paused changes nothing."""
    from db.settings import DatabaseSettings
    from infra.control import ControlTopicUnavailable
    from infra.pause import PauseNotAcknowledged, resume_catalog
    from schemas.settings import KafkaSettings

    databases = guarded(lambda: load(DatabaseSettings))
    kafka = guarded(lambda: load(KafkaSettings))
    try:
        report = resume_catalog(databases, kafka, tenant, catalog, actor(), echo, timeout)
    except ControlTopicUnavailable as exc:
        fail(exc)
    except PauseNotAcknowledged as exc:
        click.secho(f"error: {exc.code}: {exc}", fg="red", err=True)
        raise SystemExit(1) from exc
    if report is None:
        emit(
            as_json,
            {"tenant_id": tenant, "catalog_id": catalog, "state": "not_paused"},
            f"{tenant}/{catalog} was not paused",
        )
        return
    emit(as_json, report.as_dict(), f"{tenant}/{catalog} resumed: {report.pause_id}")
