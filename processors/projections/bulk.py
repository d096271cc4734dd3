"""How a rebuild's load copies an export chunk straight into a projection table.

A chunk (``schemas.exports``) is ``COPY`` text of one kind of record's fields, each
spelled as its column's type reads it. The load appends to every line the columns
each loaded row has the same value in (``LoadTarget``: the generation being loaded,
the stream's tenant and catalog, and W), and copies the lines into the kind's
projection table with one ``COPY … FROM STDIN`` (``copy_statement``), the record's
fields into the columns its projection names for them. So no record is decoded in
Python and none goes through a staging table: PostgreSQL parses each field once,
into its column, as a bare ``COPY`` of the rows would.

The copy has no conflict clause: the generation is new and empty, an export holds
each aggregate once, and a chunk commits with its count, so no row is ever inserted
twice (a duplicate is a broken export, and fails on the primary key).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import psycopg

TARGET_COLUMNS = ("generation", "tenant_id", "catalog_id", "position")
"""The columns ``LoadTarget`` gives every loaded row, after the record's own."""


def _copy_text(value: str) -> str:
    """``value`` as one field of ``COPY`` text format."""
    return (
        value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    )


@dataclass(frozen=True, slots=True)
class LoadTarget:
    """Where the loaded records go: the generation being loaded, the stream's tenant
    and catalog (the records carry neither), and W, the position every loaded row
    stores."""

    generation: int
    tenant_id: str
    catalog_id: str
    position: int

    def params(self) -> dict[str, object]:
        """The named parameters of a statement over the loaded rows."""
        return {
            "generation": self.generation,
            "tenant_id": self.tenant_id,
            "catalog_id": self.catalog_id,
            "position": self.position,
        }

    def lines(self, chunk: bytes) -> bytes:
        """The chunk's lines, each with the ``TARGET_COLUMNS`` appended (a chunk ends
        with a newline: ``schemas.exports.check_chunk``)."""
        suffix = "\t".join(
            (
                str(self.generation),
                _copy_text(self.tenant_id),
                _copy_text(self.catalog_id),
                str(self.position),
            )
        )
        return chunk.replace(b"\n", b"\t" + suffix.encode() + b"\n")


def copy_statement(table: str, columns: Iterable[str]) -> str:
    """The ``COPY`` a chunk's lines (``LoadTarget.lines``) go into ``table`` with: the
    record's fields into ``columns``, then the target's."""
    return f"COPY {table} ({', '.join((*columns, *TARGET_COLUMNS))}) FROM STDIN"


def copy_chunk(conn: psycopg.Connection, statement: str, target: LoadTarget, chunk: bytes) -> int:
    """Copy one chunk with ``statement`` (``copy_statement``'s); the rows inserted."""
    with conn.cursor() as cursor:
        with cursor.copy(statement) as copy:
            copy.write(target.lines(chunk))
        return cursor.rowcount
