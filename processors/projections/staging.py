"""The staging table a rebuild's load copies an export chunk into, and what each
projection's bulk statement needs to know of it.

A chunk (``schemas.exports``: one JSON record a line, as ``COPY … TO STDOUT`` wrote
it) is copied as it is into ``rebuild_staging``, a temporary table of one ``jsonb``
column that empties itself at every commit; then each projection inserts its kind of
record from it into the rebuild's generation with one set-based statement
(``registry.load_staged``). So no record is decoded in Python.

The bulk statements insert without a conflict clause: the generation is new and
empty, an export holds each aggregate once, and a chunk commits with its count, so
no row is ever inserted twice (a duplicate is a broken export, and fails).
"""

from __future__ import annotations

from dataclasses import dataclass

STAGING = "rebuild_staging"

CREATE = (
    f"CREATE TEMPORARY TABLE IF NOT EXISTS {STAGING} (doc jsonb NOT NULL) ON COMMIT DELETE ROWS"
)
COPY = f"COPY {STAGING} (doc) FROM STDIN"


@dataclass(frozen=True, slots=True)
class Staged:
    """Where the staged records go: the generation being loaded, the stream's tenant
    and catalog (the records carry neither), and W, the position every loaded row
    stores."""

    generation: int
    tenant_id: str
    catalog_id: str
    position: int

    def params(self, kind: str | None = None) -> dict[str, object]:
        """The named parameters of a bulk statement (for records of ``kind``, if it
        selects a kind)."""
        params: dict[str, object] = {
            "generation": self.generation,
            "tenant_id": self.tenant_id,
            "catalog_id": self.catalog_id,
            "position": self.position,
        }
        if kind is not None:
            params["kind"] = kind
        return params


def of_kind(record: str) -> str:
    """The FROM clause of a bulk statement: each staged record of ``%(kind)s`` as the
    row ``r`` of ``record``'s fields and types (``name type, …``)."""
    return (
        f" FROM {STAGING} s CROSS JOIN LATERAL jsonb_to_record(s.doc) AS r({record})"
        " WHERE s.doc ->> 'kind' = %(kind)s"
    )
