"""The rebuild's export as the rebuild bench reads it: the search documents its
manifest counts (the load writes one per item record besides the export's rows), how
long the resolver took to write it, and the run's export objects deleted at the end."""

from __future__ import annotations

from urllib.parse import quote

import psycopg

from db.product.rebuilds import RebuildRow
from db.resolver.exports import get_export
from infra.bench.sandbox import Echo, Sandbox


class Documents:
    """The search documents the load writes with its items: one per item record of the
    export, read from its manifest once the export is ready (its objects may be gone
    after the cleanup)."""

    def __init__(self, box: Sandbox) -> None:
        self._box = box
        self.count: int | None = None

    def observe(self, row: RebuildRow) -> None:
        if self.count is not None or row.export_id is None or row.phase in ("leased", "exporting"):
            return
        from infra.config import load
        from producers.exports.settings import ExportSettings
        from producers.exports.store import ExportStore
        from schemas.exports import Manifest

        with psycopg.connect(self._box.databases.resolver_dsn, autocommit=True) as conn:
            export = get_export(conn, row.export_id)
        if export is None or export.manifest_key is None or export.manifest_sha256 is None:
            return
        store = ExportStore.from_settings(load(ExportSettings))
        manifest = Manifest.from_bytes(store.get(export.manifest_key), export.manifest_sha256)
        self.count = manifest.by_aggregate.get("catalog_item", 0)


def export_write_s(box: Sandbox, row: RebuildRow) -> float:
    """The export's writing time: from its creation to its being ready (0 if it is not)."""
    assert row.export_id is not None
    with psycopg.connect(box.databases.resolver_dsn, autocommit=True) as conn:
        export = get_export(conn, row.export_id)
    if export is None or export.ready_at is None:
        return 0.0
    return (export.ready_at - export.created_at).total_seconds()


def delete_exports(tenant: str, echo: Echo) -> None:
    """The run's export objects in the shared exports bucket (best effort)."""
    from infra.config import load
    from producers.exports.settings import ExportSettings
    from producers.exports.store import ExportStore

    try:
        deleted = ExportStore.from_settings(load(ExportSettings)).delete_prefix(
            f"exports/{quote(tenant, safe='')}/"
        )
        echo(f"deleted {deleted} export objects")
    except Exception as exc:  # the figures stand; leftovers are the bench's own prefix
        echo(f"could not delete the run's export objects: {exc}")
