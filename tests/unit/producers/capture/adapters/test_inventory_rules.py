"""The inventory types refuse what would make an inventory meaningless: exclusions
without a real reason, unknown targets, and maps that are not total."""

from __future__ import annotations

import pytest

from producers.capture.adapters.inventory import (
    Excluded,
    SourceFieldInventory,
    Stored,
    excluded,
    inventory,
)
from producers.capture.exceptions import InvalidInventory


@pytest.mark.parametrize(
    "reason",
    [
        "",
        "   ",
        "unused",
        "data minimisation",
        "not read today, the adapter ignores this field",
        "we will map this field to something later on",
        "TODO decide where the warranty should be stored",
        "skipped for now until the catalog has a warranty field",
        "not needed by anyone in the catalog at the moment",
    ],
)
def test_an_exclusion_without_a_real_reason_is_refused(reason: str) -> None:
    with pytest.raises(InvalidInventory) as caught:
        excluded(reason)
    assert caught.value.code == "INVALID_INVENTORY"


def test_a_real_reason_is_kept_with_its_whitespace_collapsed() -> None:
    exclusion = excluded(
        "data minimisation: reviews carry shoppers' names,\n   and the catalog keeps none"
    )
    assert exclusion.reason == (
        "data minimisation: reviews carry shoppers' names, and the catalog keeps none"
    )
    assert exclusion == excluded(exclusion.reason)


def test_excluded_is_the_only_way_to_write_an_exclusion() -> None:
    with pytest.raises(InvalidInventory, match=r"excluded\(reason\)"):
        Excluded("a long enough reason that skips the constructor entirely")


@pytest.mark.parametrize(
    "target",
    ["title", "class_id", "source_item_id", "identity.gtin", "attributes.colour", "offer.price"],
)
def test_stored_targets_name_a_place_on_the_product(target: str) -> None:
    assert Stored(target).target == target


@pytest.mark.parametrize(
    "target",
    [
        "",
        "identity",
        "attributes.",
        "offers.price",
        "Title",
        "attributes.Colour",
        "fingerprint",
        "locator",
    ],
)
def test_stored_refuses_a_target_that_is_no_place_on_the_product(target: str) -> None:
    with pytest.raises(InvalidInventory, match="stored target"):
        Stored(target)


def test_an_inventory_names_missing_and_unknown_fields() -> None:
    with pytest.raises(InvalidInventory, match=r"without a disposition: \['b'\].*field: \['c'\]"):
        inventory(("a", "b"), {"a": Stored("title"), "c": Stored("class_id")})
    with pytest.raises(InvalidInventory, match="listed twice: a"):
        SourceFieldInventory(("a", "a"), {"a": Stored("title")})
    with pytest.raises(InvalidInventory, match="neither Stored nor excluded"):
        inventory(("a",), {"a": "stored"})


def test_an_inventory_answers_dispositions_and_unaccounted_names() -> None:
    held = inventory(
        ("name", "image"),
        {"name": Stored("title"), "image": excluded("photo links; the item has no media field")},
    )
    assert held.disposition("name") == Stored("title")
    assert held.disposition("colour") is None
    assert held.stored() == {"name": Stored("title")}
    assert held.unaccounted(frozenset({"name", "colour", "aa"})) == ["aa", "colour"]
