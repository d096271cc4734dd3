"""The projection descriptions (pure: no database): a description that cannot be
written refuses to be built, and the registry keeps each aggregate type once."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pytest

from processors.projections import listing_mappings, registry
from processors.projections.table import Column, PartialUpdate, TableProjection, plain_id
from schemas.events import Envelope
from schemas.ids import AggregateKey


@dataclass(frozen=True, slots=True)
class Row:
    tenant_id: str
    catalog_id: str
    thing_id: str
    colour: str
    revision: int
    position: int


@dataclass(frozen=True, slots=True)
class _Wider:
    tenant_id: str
    catalog_id: str
    listing_id: str
    item_id: str
    item_revision: int
    decision_id: str
    colour: str
    revision: int
    position: int


def _fold(events: Iterable[Envelope]) -> Mapping[AggregateKey, object]:
    return {}


def _thing(*columns: Column, partial: PartialUpdate | None = None) -> TableProjection:
    return TableProjection(
        aggregate="thing",
        table="product_thing",
        id=plain_id("thing_id"),
        columns=columns,
        row=Row,
        fold=_fold,
        partial=partial,
    )


def test_a_description_builds_its_statements_once_from_its_columns() -> None:
    thing = _thing(Column("colour", "text"))
    assert thing.upsert.startswith(
        "INSERT INTO product_thing (generation, tenant_id, catalog_id, thing_id, colour,"
        " revision, position) SELECT %b, * FROM unnest(%b::text[], %b::text[], %b::text[],"
        " %b::text[], %b::int8[], %b::int8[])"
    )
    assert thing.upsert.endswith(
        " ON CONFLICT (generation, tenant_id, catalog_id, thing_id) DO UPDATE SET"
        " colour = excluded.colour, revision = excluded.revision,"
        " position = excluded.position, updated_at = now()"
        " WHERE product_thing.revision < excluded.revision"
    )
    assert "WHERE generation = %b AND tenant_id = k.tenant_id" in thing.probe
    assert thing.update is None
    assert thing.copy is None  # no export kind is a "thing": a load refuses its records


def test_a_column_the_row_has_no_field_for_is_refused() -> None:
    with pytest.raises(ValueError, match="size"):
        _thing(Column("colour", "text"), Column("size", "text"))


def test_a_column_named_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="twice"):
        _thing(Column("colour", "text"), Column("colour", "text"))


def test_a_partial_update_of_a_column_the_projection_lacks_is_refused() -> None:
    with pytest.raises(ValueError, match="size"):
        _thing(Column("colour", "text"), partial=PartialUpdate(Row, ("size",)))


def test_the_registry_keeps_each_aggregate_type_once() -> None:
    assert [p.aggregate for p in registry.PROJECTIONS] == list(registry.BY_AGGREGATE)
    with pytest.raises(ValueError, match="two projections keep aggregate type 'thing'"):
        registry.by_aggregate(_thing(Column("colour", "text")), _thing(Column("colour", "text")))


def test_each_export_field_is_copied_into_the_column_of_its_name_the_id_into_the_ids() -> None:
    assert listing_mappings.PROJECTION.copy == (
        "COPY product_listing_mapping (listing_id, revision, item_id, item_revision,"
        " decision_id, generation, tenant_id, catalog_id, position) FROM STDIN"
    )
    with pytest.raises(ValueError, match="records give no"):
        TableProjection(
            aggregate="listing_mapping",
            table="product_listing_mapping",
            id=plain_id("listing_id"),
            columns=(*listing_mappings.PROJECTION.columns, Column("colour", "text")),
            row=_Wider,
            fold=_fold,
        )


def test_a_column_without_a_type_takes_its_tables_and_an_unknown_one_is_refused() -> None:
    assert [c.type for c in listing_mappings.PROJECTION.columns] == [None, None, None]
    assert "%b::bigint[], %b::uuid[]" in listing_mappings.PROJECTION.upsert
    with pytest.raises(ValueError, match=r"product_thing\.colour: no such column"):
        _thing(Column("colour"))
