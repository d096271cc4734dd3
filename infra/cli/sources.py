"""Source bindings: which catalog and adapter a source's captures go to."""

from __future__ import annotations

import click

from infra.cli.output import actor, echo, emit, fail, resolver_conn


@click.group()
def sources() -> None:
    """Source bindings: which catalog and adapter a source's captures go to."""


@sources.command("register")
@click.option("--tenant", required=True)
@click.option("--source", required=True, help="The source, as its collectors are registered.")
@click.option("--catalog", required=True, help="The catalog its products resolve into.")
@click.option("--adapter", required=True, help="The source adapter that parses its captures.")
def sources_register(tenant: str, source: str, catalog: str, adapter: str) -> None:
    """Bind a source to a catalog and an adapter (idempotent; a source is bound once)."""
    from db.unit_of_work import Transaction
    from producers.capture.adapters import ADAPTERS
    from producers.capture.worker.sources import BindingRefused, register

    with resolver_conn() as conn, conn.transaction():
        try:
            row = register(Transaction(conn), tenant, source, catalog, adapter, actor(), ADAPTERS)
        except BindingRefused as exc:
            fail(exc)
    click.echo(f"{row.tenant_id}/{row.source} -> catalog {row.catalog_id}, adapter {row.adapter}")


@sources.command("list")
@click.option("--tenant", help="Only this tenant.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per binding.")
def sources_list(tenant: str | None, as_json: bool) -> None:
    """Every source binding, in (tenant, source) order."""
    from db.repositories.source_bindings import page
    from db.unit_of_work import Transaction

    listed = 0
    after = ("", "")
    with resolver_conn() as conn:
        while rows := page(Transaction(conn), tenant, after, 500):
            for row in rows:
                listed += 1
                emit(
                    as_json,
                    {
                        "tenant": row.tenant_id,
                        "source": row.source,
                        "catalog": row.catalog_id,
                        "adapter": row.adapter,
                        "registered_by": row.registered_by,
                        "created_at": row.created_at.isoformat(),
                    },
                    f"{row.tenant_id}/{row.source:<24} catalog {row.catalog_id:<16}"
                    f" adapter {row.adapter}",
                )
            after = (rows[-1].tenant_id, rows[-1].source)
    if not listed and not as_json:
        echo("no source bindings")
