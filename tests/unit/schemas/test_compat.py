"""Schema evolution: today's schemas read every release, and check_backward knows the rules."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pytest

from schemas.codec import AVRO_DIR, CODEC, ENVELOPE
from schemas.compat import ReleasedPair, check_backward, check_release, released_pairs

PAIRS = released_pairs()


def record(*fields: dict[str, Any], name: str = "Item") -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": "test", "fields": list(fields)}


def field(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **extra}


def enum(*symbols: str, **extra: Any) -> dict[str, Any]:
    return {"type": "enum", "name": "Status", "symbols": list(symbols), **extra}


# --- the guard: fails when a schema change breaks compatibility -----------------


def test_the_first_release_is_on_record() -> None:
    names = {(pair.release, pair.name) for pair in PAIRS}
    assert ("v1", ENVELOPE) in names
    assert ("v1", "gapless.catalog.StreamKey") in names


@pytest.mark.parametrize("pair", PAIRS, ids=lambda pair: f"{pair.release}/{pair.name}")
def test_current_schema_reads_released_data(pair: ReleasedPair) -> None:
    assert check_release(pair) == []


def test_a_deleted_schema_is_reported(tmp_path: Path) -> None:
    avro_dir = tmp_path / "avro"
    shutil.copytree(AVRO_DIR, avro_dir)
    (avro_dir / "gapless.catalog.StreamKey.avsc").unlink()
    problems = [p for pair in released_pairs(avro_dir) for p in check_release(pair)]
    assert "gapless.catalog.StreamKey: released in v1 but no current schema exists" in problems


def test_an_incompatible_edit_to_the_envelope_is_caught() -> None:
    released = CODEC.value_schema
    edited: Any = copy.deepcopy(released)
    retired = edited["fields"][-1]["type"][1]
    assert retired["name"] == "gapless.catalog.CatalogItemRetired"
    retired["fields"][0]["type"] = "int"
    problems = check_backward(released, edited)
    assert len(problems) == 1
    assert problems[0].startswith("Envelope.payload<CatalogItemRetired>.reason:")


# --- rejected changes ------------------------------------------------------------


def test_field_added_without_default_is_rejected() -> None:
    old = record(field("id", "string"))
    new = record(field("id", "string"), field("title", "string"))
    assert check_backward(old, new) == [
        "Item.title: field added without a default; old data has no value for it"
    ]


def test_narrowing_long_to_int_is_rejected() -> None:
    old = record(field("revision", "long"))
    new = record(field("revision", "int"))
    assert check_backward(old, new) == ["Item.revision: writer type long cannot be read as int"]


def test_removing_an_enum_symbol_is_rejected() -> None:
    old = record(field("status", enum("ACTIVE", "RETIRED")))
    new = record(field("status", enum("ACTIVE")))
    (problem,) = check_backward(old, new)
    assert problem.startswith("Item.status: enum test.Status lost symbols ['RETIRED']")


def test_removing_a_union_branch_is_rejected() -> None:
    old = record(field("parent", ["null", "string", "long"]))
    new = record(field("parent", ["null", "string"]))
    (problem,) = check_backward(old, new)
    assert problem.startswith("Item.parent<long>: union branch long was removed")


def test_removing_a_record_branch_from_a_union_is_rejected() -> None:
    upserted = record(field("title", "string"), name="Upserted")
    retired = record(field("reason", "string"), name="Retired")
    old = record(field("payload", [upserted, retired]))
    new = record(field("payload", [copy.deepcopy(upserted)]))
    (problem,) = check_backward(old, new)
    assert problem.startswith("Item.payload<Retired>: union branch record test.Retired was removed")


def test_renaming_a_record_without_an_alias_is_rejected() -> None:
    (problem,) = check_backward(record(name="Item"), record(name="Article"))
    assert "cannot be read as record test.Article" in problem


def test_changing_a_fixed_size_is_rejected() -> None:
    old = record(field("hash", {"type": "fixed", "name": "Hash", "size": 16}))
    new = record(field("hash", {"type": "fixed", "name": "Hash", "size": 32}))
    assert len(check_backward(old, new)) == 1


def test_narrowing_inside_arrays_and_maps_is_rejected() -> None:
    old = record(
        field("a", {"type": "array", "items": "long"}),
        field("m", {"type": "map", "values": "double"}),
    )
    new = record(
        field("a", {"type": "array", "items": "int"}),
        field("m", {"type": "map", "values": "float"}),
    )
    assert check_backward(old, new) == [
        "Item.a[]: writer type long cannot be read as int",
        "Item.m{}: writer type double cannot be read as float",
    ]


def test_making_a_nullable_field_required_is_rejected() -> None:
    old = record(field("parent", ["null", "string"], default=None))
    new = record(field("parent", "string"))
    (problem,) = check_backward(old, new)
    assert problem == "Item.parent<null>: writer type null cannot be read as string"


def test_changing_a_logical_type_is_rejected() -> None:
    old = record(field("at", {"type": "long", "logicalType": "timestamp-micros"}))
    new = record(field("at", {"type": "long", "logicalType": "timestamp-millis"}))
    (problem,) = check_backward(old, new)
    assert "logical type changed from timestamp-micros to timestamp-millis" in problem


# --- accepted changes --------------------------------------------------------------


def test_field_added_with_default_is_accepted() -> None:
    old = record(field("id", "string"))
    new = record(field("id", "string"), field("title", "string", default=""))
    assert check_backward(old, new) == []


def test_field_removed_is_accepted() -> None:
    old = record(field("id", "string"), field("title", "string"))
    new = record(field("id", "string"))
    assert check_backward(old, new) == []


@pytest.mark.parametrize(
    ("writer", "reader"),
    [
        ("int", "long"),
        ("int", "double"),
        ("long", "float"),
        ("float", "double"),
        ("string", "bytes"),
        ("bytes", "string"),
    ],
)
def test_promotions_are_accepted(writer: str, reader: str) -> None:
    assert check_backward(record(field("n", writer)), record(field("n", reader))) == []


def test_adding_an_enum_symbol_or_a_default_is_accepted() -> None:
    old = record(field("status", enum("ACTIVE", "RETIRED")))
    assert check_backward(old, record(field("status", enum("ACTIVE", "RETIRED", "DRAFT")))) == []
    with_default = enum("ACTIVE", "UNKNOWN", default="UNKNOWN")
    assert check_backward(old, record(field("status", with_default))) == []


def test_adding_a_union_branch_or_making_a_field_nullable_is_accepted() -> None:
    old = record(field("parent", "string"), field("n", ["null", "int"]))
    new = record(field("parent", ["null", "string"], default=None), field("n", ["null", "long"]))
    assert check_backward(old, new) == []


def test_renames_through_aliases_are_accepted() -> None:
    old = record(field("title", "string"), name="Item")
    new = record(field("name", "string", aliases=["title"]), name="Article")
    new["aliases"] = ["Item"]
    assert check_backward(old, new) == []


def test_recursive_types_terminate() -> None:
    node = record(field("value", "int"), field("next", ["null", "test.Node"]), name="Node")
    widened = record(field("value", "long"), field("next", ["null", "test.Node"]), name="Node")
    narrowed = record(field("value", "int"), field("next", ["null", "test.Node"]), name="Node")
    assert check_backward(node, widened) == []
    assert check_backward(widened, narrowed) == [
        "Node.value: writer type long cannot be read as int"
    ]
