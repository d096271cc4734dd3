"""The shared kernel: stream ids and the composite aggregate ids both sides use."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from schemas.ids import (
    StreamId,
    definition_id,
    parse_definition_id,
    parse_value_id,
    value_id,
)


def test_aggregate_ids_split_at_their_last_slash() -> None:
    assert definition_id("size", 3) == "size/3"
    assert value_id("shop/item-1", "size") == "shop/item-1/size"


def test_aggregate_ids_split_back_into_their_columns() -> None:
    assert parse_value_id("shop/i1/size") == ("shop/i1", "size")
    assert parse_value_id("no-slash") is None
    assert parse_definition_id("size/12") == ("size", 12)
    assert parse_definition_id("size/x") is None
    assert parse_definition_id("/3") is None


keys = st.from_regex(r"[a-z][a-z0-9_.-]{0,20}", fullmatch=True)
items = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30)


@given(keys, st.integers(min_value=0, max_value=2**40))
def test_a_definition_id_round_trips(key: str, version: int) -> None:
    assert parse_definition_id(definition_id(key, version)) == (key, version)


@given(items, keys)
def test_a_value_id_round_trips_even_when_the_item_id_holds_slashes(item: str, key: str) -> None:
    assert parse_value_id(value_id(item, key)) == (item, key)


def test_a_stream_id_is_a_tuple_with_names() -> None:
    stream = StreamId("t1", "c1", 2)
    tenant, catalog, epoch = stream
    assert (tenant, catalog, epoch) == ("t1", "c1", 2) == stream
    assert {stream: 1}[("t1", "c1", 2)] == 1
    assert str(stream) == "t1/c1@2"
