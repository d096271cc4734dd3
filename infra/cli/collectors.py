"""Collector credentials (register, rotate, revoke, list) and local dev tokens."""

from __future__ import annotations

from typing import Any

import click

from infra.cli.output import echo, emit, fail, guarded, resolver_conn


@click.group()
def collectors() -> None:
    """Collector credentials: register, rotate, revoke, list (operator commands)."""


def _credential_line(row: Any) -> str:
    state = f"revoked {row.revoked_at.isoformat()}" if row.revoked_at else "active"
    return f"{row.client_id:<32} {row.tenant_id}/{row.source}/{row.instance_id}  {state}"


@collectors.command("register")
@click.option("--tenant", required=True)
@click.option("--source", required=True, help="The source the collector captures, e.g. shop-x.")
@click.option("--instance-id", required=True, help="The stable collector instance.")
@click.option("--client-id", required=True, help="The credential's client id (JWT sub).")
def collectors_register(tenant: str, source: str, instance_id: str, client_id: str) -> None:
    """Map CLIENT-ID to a collector instance (created if new; idempotent)."""
    from producers.capture.intake.collectors import register
    from producers.capture.intake.exceptions import CollectorRegistryError

    with resolver_conn() as conn:
        try:
            row = register(conn, client_id, tenant, source, instance_id)
        except CollectorRegistryError as exc:
            fail(exc)
    click.echo(_credential_line(row))


@collectors.command("rotate")
@click.option("--client-id", required=True, help="The credential being replaced.")
@click.option("--new-client-id", required=True, help="The new credential's client id.")
@click.option(
    "--revoke-old/--keep-old",
    default=False,
    show_default=True,
    help="Revoke the old credential at once (default: keep it until revoked).",
)
def collectors_rotate(client_id: str, new_client_id: str, revoke_old: bool) -> None:
    """Give the instance of CLIENT-ID a new credential; its receipts stay readable."""
    from producers.capture.intake.collectors import rotate
    from producers.capture.intake.exceptions import CollectorRegistryError

    with resolver_conn() as conn:
        try:
            row = rotate(conn, client_id, new_client_id, revoke_old)
        except CollectorRegistryError as exc:
            fail(exc)
    click.echo(_credential_line(row))


@collectors.command("revoke")
@click.option("--client-id", required=True)
def collectors_revoke(client_id: str) -> None:
    """Refuse CLIENT-ID's tokens from now on (idempotent)."""
    from producers.capture.intake.collectors import revoke
    from producers.capture.intake.exceptions import CollectorRegistryError

    with resolver_conn() as conn:
        try:
            row = revoke(conn, client_id)
        except CollectorRegistryError as exc:
            fail(exc)
    click.echo(_credential_line(row))


@collectors.command("list")
@click.option("--tenant", help="Only this tenant.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per credential.")
def collectors_list(tenant: str | None, as_json: bool) -> None:
    """Every credential with its instance and state, in client-id order."""
    from db.resolver.intake import list_credentials

    listed = 0
    after = ""
    with resolver_conn() as conn:
        while page := list_credentials(conn, tenant, after, limit=500):
            for row in page:
                listed += 1
                emit(
                    as_json,
                    {
                        "client_id": row.client_id,
                        "tenant": row.tenant_id,
                        "source": row.source,
                        "instance_id": row.instance_id,
                        "created_at": row.created_at.isoformat(),
                        "revoked_at": row.revoked_at.isoformat() if row.revoked_at else None,
                    },
                    _credential_line(row),
                )
            after = page[-1].client_id
    if not listed and not as_json:
        echo("no collector credentials")


@click.command("collector-token")
@click.option("--client-id", required=True, help="A registered credential's client id.")
@click.option("--tenant", help="Also claim this tenant (checked against the registry).")
@click.option("--ttl", default=3600, show_default=True, help="Seconds until it expires.")
def collector_token(client_id: str, tenant: str | None, ttl: int) -> None:
    """Print a collector token signed with the local dev key (local runs only).

    Only for a registered credential that is not revoked (and, with --tenant, of that
    tenant): a token the API would refuse is refused here already."""
    from infra.local import collector_keys
    from infra.local.layout import current_layout
    from producers.capture.intake.collectors import resolve
    from schemas.http.exceptions import ApiError

    with resolver_conn() as conn:
        try:
            resolve(conn, client_id, {"tenant_id": tenant} if tenant else {})
        except ApiError as exc:
            fail(
                ValueError(
                    f"{exc.message}; register a credential with `gapless collectors register`"
                    " (or `rotate` a revoked one) and mint a token for it"
                )
            )
    token = guarded(lambda: collector_keys.mint(current_layout(), client_id, tenant, ttl))
    click.echo(token)
