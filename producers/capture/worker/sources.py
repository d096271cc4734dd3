"""Source bindings: the catalog and the adapter the captures of a (tenant, source) go
to. An operator registers one per source; the worker refuses, visibly, a capture
whose source has none."""

from __future__ import annotations

from collections.abc import Collection

from db.repositories import source_bindings as rows
from db.repositories.source_bindings import BindingRow
from db.unit_of_work import Transaction
from producers.capture.exceptions import Failure, SourceNotBound


class BindingRefused(Failure):
    """A registration that conflicts with the source's binding or names no adapter."""

    code = "SOURCE_BINDING_REFUSED"


def register(
    tx: Transaction,
    tenant_id: str,
    source: str,
    catalog_id: str,
    adapter: str,
    actor: str,
    known_adapters: Collection[str],
) -> BindingRow:
    """Bind the source (idempotent: the same binding again is returned as it is).

    A source is bound once: moving it to another catalog or adapter would split its
    items' history across catalogs, so a different binding is refused.
    """
    if adapter not in known_adapters:
        raise BindingRefused(
            f"no adapter is named {adapter!r}; known: {', '.join(sorted(known_adapters))}"
        )
    if not (tenant_id and source and catalog_id):
        raise BindingRefused("a binding needs a tenant, a source and a catalog")
    stored = rows.insert(tx, tenant_id, source, catalog_id, adapter, actor)
    if (stored.catalog_id, stored.adapter) != (catalog_id, adapter):
        raise BindingRefused(
            f"{tenant_id}/{source} is already bound to catalog {stored.catalog_id!r} with"
            f" adapter {stored.adapter!r}"
        )
    return stored


def binding_of(tx: Transaction, tenant_id: str, source: str) -> BindingRow:
    found = rows.get(tx, tenant_id, source)
    if found is None:
        raise SourceNotBound(
            f"source {source!r} of tenant {tenant_id!r} is bound to no catalog; register it"
            " with `gapless sources register` and retry the job"
        )
    return found
