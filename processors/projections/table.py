"""A projection kept as one row per aggregate, described as data; its revision probe
and its revision-guarded upsert are built here from the description, once, at import.

Every such table is keyed by ``(generation, tenant_id, catalog_id, <id columns>)``,
where the id columns are what the aggregate id names (a plain id, a uuid, or the
parts of a composite id), and ends in ``revision`` (the aggregate's), ``position``
(the stream position of the event that wrote the row) and ``updated_at``. The
description adds the table, the id, the other columns and the fold (events -> rows);
a row is a dataclass whose fields are named after the columns. A column's type is
the table's (``db.tables.product``, the one description of the schema), unless its
values are sent as another and converted by its ``select``. So a new projection is a
new description, not a copy of the SQL or of the table.

The description also gives the statement a rebuild's load copies an export chunk
of the aggregate type with (``copy``: each of the record's fields, ``schemas.
exports.KINDS``, into the column of its name, the id's fields into the id's
columns; ``processors.projections.bulk``), so the bulk path writes the same columns
from the same description as the live one; a description whose columns the record's
fields do not cover fails at import.

What the statements keep, for every description:

* a row never moves to a lower revision: the upsert updates only
  ``WHERE revision < excluded.revision`` (so a duplicate changes nothing, not even
  ``updated_at``);
* a generation sees only its own rows: the generation is the key's first column in
  the probe, the conflict target and the update;
* an aggregate id names a row only in the one spelling the resolver writes
  (``schemas.ids``): an id that does not parse, or does not format back to itself,
  reads as absent rather than as some other aggregate's revision.
"""

from __future__ import annotations

import dataclasses
import operator
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from sqlalchemy.dialects import postgresql

from db.tables.product import metadata
from processors.projections.bulk import LoadTarget, copy_chunk, copy_statement
from schemas.events import Envelope
from schemas.exports import KINDS
from schemas.ids import AggregateKey

Parts = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Column:
    """A column; the PostgreSQL type its values are sent as (they go as one binary
    array of that type; default: the column's type in ``db.tables.product``); how a
    row's value becomes a parameter (``encode``, default as it is); and the SQL that
    turns the unnested value into the stored one (``select``, with ``{}`` for the
    value; default the value itself)."""

    name: str
    type: str | None = None
    encode: Callable[[Any], object] | None = None
    select: str | None = None


@dataclass(frozen=True, slots=True)
class AggregateId:
    """How an aggregate id maps onto the key columns after tenant and catalog:
    ``parse`` gives the columns' values (None for an id of the wrong shape) and
    ``format`` spells them back as the id; ``fields`` names the export record's
    field that holds each column (``schemas.exports``)."""

    columns: tuple[Column, ...]
    parse: Callable[[str], Parts | None]
    format: Callable[..., str]
    fields: tuple[str, ...]


def plain_id(column: str) -> AggregateId:
    """The aggregate id is the text of one key column (an export record's ``id``)."""
    return AggregateId((Column(column, "text"),), _as_is, str, ("id",))


def uuid_id(column: str) -> AggregateId:
    """The aggregate id is a uuid, stored in a uuid key column (an export record's
    ``id``)."""
    return AggregateId((Column(column, "uuid"),), _uuid_parts, str, ("id",))


def composite_id(
    columns: tuple[Column, ...],
    parse: Callable[[str], Parts | None],
    format: Callable[..., str],
) -> AggregateId:
    """The aggregate id is built from several key columns (``schemas.ids``); an export
    record has a field of each column's name."""
    return AggregateId(columns, parse, format, tuple(c.name for c in columns))


def _as_is(aggregate_id: str) -> Parts:
    return (aggregate_id,)


def _uuid_parts(aggregate_id: str) -> Parts | None:
    try:
        return (uuid.UUID(aggregate_id),)
    except ValueError:
        return None


def jsonb_list(values: Iterable[str]) -> Jsonb:
    """A sequence as one JSON array (a parameter of a ``jsonb[]`` array)."""
    return Jsonb(list(values))


@dataclass(frozen=True, slots=True)
class PartialUpdate:
    """Changes to some columns of a row the batch has not seen whole (its earlier
    revision is stored): ``row`` is the change's dataclass, ``columns`` what it sets.
    Written as one guarded UPDATE; a row that is not stored stays absent."""

    row: type
    columns: tuple[str, ...]


_TAIL = (Column("revision", "int8"), Column("position", "int8"))


@dataclass(frozen=True, slots=True)
class TableProjection:
    """One projection: its aggregate type, table, id, columns (besides the key and the
    revision, position and updated_at every such table has), row dataclass and fold.

    ``fold`` collapses a batch's applied events (in application order) into at most
    one row per aggregate, so no statement touches a row twice.
    """

    aggregate: str
    table: str
    id: AggregateId
    columns: tuple[Column, ...]
    row: type
    fold: Callable[[Iterable[Envelope]], Mapping[AggregateKey, object]]
    partial: PartialUpdate | None = None
    # Built from the above by __post_init__.
    probe: str = field(init=False, repr=False, compare=False)
    upsert: str = field(init=False, repr=False, compare=False)
    copy: str | None = field(init=False, repr=False, compare=False)
    update: str | None = field(init=False, repr=False, compare=False)
    _whole: tuple[Column, ...] = field(init=False, repr=False, compare=False)
    _changed: tuple[Column, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        key = _typed(
            self.table,
            (Column("tenant_id", "text"), Column("catalog_id", "text"), *self.id.columns),
        )
        columns = _typed(self.table, self.columns)
        whole = (*key, *columns, *_TAIL)
        _check_fields(self.row, whole)
        set_ = object.__setattr__
        set_(self, "_whole", whole)
        set_(self, "probe", _probe_sql(self.table, key))
        set_(self, "upsert", _upsert_sql(self.table, key, whole))
        set_(self, "copy", _copy_sql(self.table, self.aggregate, self.id, whole))
        set_(self, "update", None)
        set_(self, "_changed", ())
        if self.partial is not None:
            by_name = {c.name: c for c in columns}
            unknown = [n for n in self.partial.columns if n not in by_name]
            if unknown:
                raise ValueError(f"{self.table}: partial update of unknown columns {unknown}")
            changed = (*key, *(by_name[n] for n in self.partial.columns), *_TAIL)
            _check_fields(self.partial.row, changed)
            set_(self, "_changed", changed)
            set_(self, "update", _update_sql(self.table, key, changed))

    def load_revisions(
        self, conn: psycopg.Connection, generation: int, keys: Iterable[AggregateKey]
    ) -> dict[AggregateKey, int]:
        """The applied revision of each aggregate among ``keys`` that the table has
        (absent: never applied, or an id this projection's rows cannot have)."""
        wanted: list[Parts] = []
        for key in sorted({k for k in keys if k[2] == self.aggregate}):
            parts = self.id.parse(key[3])
            if parts is not None and self.id.format(*parts) == key[3]:
                wanted.append((key[0], key[1], *parts))
        if not wanted:
            return {}
        params: list[object] = [list(c) for c in zip(*wanted, strict=True)]
        params.append(generation)
        rows = conn.execute(self.probe, params).fetchall()
        return {(r[0], r[1], self.aggregate, self.id.format(*r[2:-1])): int(r[-1]) for r in rows}

    def write(self, conn: psycopg.Connection, generation: int, changes: Iterable[object]) -> None:
        """Upsert the whole rows in one statement and, where the projection has partial
        changes, apply those in one more; a row never moves to a lower revision."""
        rows = list(changes)
        if self.partial is None:
            whole, partial = rows, []
        else:
            whole = [r for r in rows if isinstance(r, self.row)]
            partial = [r for r in rows if isinstance(r, self.partial.row)]
        if whole:
            conn.execute(self.upsert, [generation, *_arrays(self._whole, whole)])
        if partial and self.update is not None:
            conn.execute(self.update, [*_arrays(self._changed, partial), generation])

    def apply(self, conn: psycopg.Connection, generation: int, events: Iterable[Envelope]) -> None:
        """Fold the applied events of a batch and write them: what the applier calls."""
        self.write(conn, generation, self.fold(events).values())

    def load_chunk(self, conn: psycopg.Connection, target: LoadTarget, chunk: bytes) -> int:
        """Copy an export chunk of this aggregate type into the (new, empty) generation
        in one statement; the rows inserted. What a rebuild's load calls."""
        if self.copy is None:
            raise ValueError(f"{self.table}: no export kind is {self.aggregate!r}")
        return copy_chunk(conn, self.copy, target, chunk)


_DIALECT = postgresql.dialect()  # type: ignore[no-untyped-call]


def _typed(table: str, columns: tuple[Column, ...]) -> tuple[Column, ...]:
    """``columns``, each with the type its values are sent as: its own if it names one,
    else its column's in ``db.tables.product``."""
    described = metadata.tables.get(table)
    typed = []
    for column in columns:
        if column.type is None:
            if described is None or column.name not in described.c:
                raise ValueError(
                    f"{table}.{column.name}: no such column in db.tables.product to take"
                    " its type from"
                )
            sql_type = described.c[column.name].type.compile(dialect=_DIALECT).lower()
            column = dataclasses.replace(column, type=sql_type)
        typed.append(column)
    return tuple(typed)


def _check_fields(row: type, columns: tuple[Column, ...]) -> None:
    names = [c.name for c in columns]
    if len(set(names)) != len(names):
        raise ValueError(f"{row.__name__}: a column is named twice in {names}")
    fields = {f.name for f in dataclasses.fields(row)}
    missing = [n for n in names if n not in fields]
    if missing:
        raise ValueError(f"{row.__name__} has no field for the columns {missing}")


def _arrays(columns: tuple[Column, ...], rows: list[object]) -> list[list[object]]:
    """The rows as one list per column (each sent as one binary array)."""
    get = operator.attrgetter(*(c.name for c in columns))
    arrays: list[list[object]] = []
    for column, values in zip(columns, zip(*map(get, rows), strict=True), strict=True):
        encode = column.encode
        arrays.append(list(values) if encode is None else [encode(v) for v in values])
    return arrays


def _unnest(columns: tuple[Column, ...]) -> str:
    return "unnest(" + ", ".join(f"%b::{c.type}[]" for c in columns) + ")"


def _selected(column: Column, field: str | None = None) -> str:
    value = f"r.{field or column.name}"
    return column.select.format(value) if column.select else value


def _probe_sql(table: str, key: tuple[Column, ...]) -> str:
    # One index probe per key: the LIMIT (the key is the primary key, so at most one
    # row matches anyway) keeps PostgreSQL from turning the lookup into a join, which
    # it would plan as a hash of the whole table when it thinks the table small.
    names = [c.name for c in key]
    return (
        f"SELECT {', '.join(f'k.{n}' for n in names)}, p.revision"
        f" FROM {_unnest(key)} AS k({', '.join(names)})"
        f" CROSS JOIN LATERAL (SELECT revision FROM {table} WHERE generation = %b"
        f"{''.join(f' AND {n} = k.{n}' for n in names)} LIMIT 1) p"
    )


def _upsert_sql(table: str, key: tuple[Column, ...], whole: tuple[Column, ...]) -> str:
    names = [c.name for c in whole]
    if any(c.select for c in whole):
        values = ", ".join(_selected(c) for c in whole)
        source = f"SELECT %b, {values} FROM {_unnest(whole)} AS r({', '.join(names)})"
    else:
        source = f"SELECT %b, * FROM {_unnest(whole)}"
    keys = {c.name for c in key}
    sets = "".join(f"{n} = excluded.{n}, " for n in names if n not in keys)
    return (
        f"INSERT INTO {table} (generation, {', '.join(names)}) {source}"
        f" ON CONFLICT (generation, {', '.join(c.name for c in key)})"
        f" DO UPDATE SET {sets}updated_at = now()"
        f" WHERE {table}.revision < excluded.revision"
    )


def _update_sql(table: str, key: tuple[Column, ...], changed: tuple[Column, ...]) -> str:
    names = [c.name for c in changed]
    keys = {c.name for c in key}
    sets = "".join(f"{n} = k.{n}, " for n in names if n not in keys)
    return (
        f"UPDATE {table} p SET {sets}updated_at = now()"
        f" FROM {_unnest(changed)} AS k({', '.join(names)})"
        f" WHERE p.generation = %b{''.join(f' AND p.{c.name} = k.{c.name}' for c in key)}"
        " AND p.revision < k.revision"
    )


def _copy_sql(table: str, aggregate: str, id: AggregateId, whole: tuple[Column, ...]) -> str | None:
    """The ``COPY`` of an export chunk of ``aggregate``: each record field's column
    (None: the export has no such kind)."""
    if aggregate not in KINDS:
        return None
    by_field = dict(zip(id.fields, (c.name for c in id.columns), strict=True))
    names = {c.name for c in whole}
    columns = [by_field.get(f.name, f.name) for f in KINDS[aggregate]]
    if not set(columns) <= names or len(set(columns)) != len(columns):
        raise ValueError(f"{table}: the export's {aggregate} fields {columns} are not its columns")
    missing = names - set(columns) - {"tenant_id", "catalog_id", "position"}
    if missing:
        raise ValueError(f"{table}: the export's {aggregate} records give no {sorted(missing)}")
    return copy_statement(table, columns)
