"""Identity lookups (INV-02) against real PostgreSQL: a lookup joins on all five
columns, and strong identifiers narrow a match but never make one."""

from __future__ import annotations

import pytest

from db.settings import DatabaseSettings
from producers.resolver.exceptions import (
    InvalidIdentity,
)
from producers.resolver.identity.lookups import lookup, lookup_item
from tests.integration.producers.resolver.conftest import (
    UowFactory,
)
from tests.integration.producers.resolver.identity.conftest import (
    EAN13,
    OTHER_EAN13,
    SHOE,
    C,
    T,
    add,
    approve,
    find,
    h,
    new_generation,
)


def test_lookup_joins_on_all_five_columns(uow: UowFactory, clean_db: DatabaseSettings) -> None:
    add(uow, "c", brand="ACME", mpn="X-2")
    add(uow, "boot", class_id="boot", brand="ACME", mpn="X-2")
    add(uow, "c2", catalog="c2", brand="ACME", mpn="X-2")
    for class_id in (SHOE, "boot"):
        gen = new_generation(uow, class_id=class_id)
        approve(uow, gen, class_id=class_id)
    digest = h("acme", "x-2")
    with uow() as u:
        assert lookup_item(u.tx, T, C, SHOE, 1, digest) == "c"
        assert lookup_item(u.tx, T, C, "boot", 1, digest) == "boot"
        assert lookup_item(u.tx, T, C, SHOE, 2, digest) is None
        assert lookup_item(u.tx, T, "c2", SHOE, 1, digest) is None
        assert lookup_item(u.tx, "t2", C, SHOE, 1, digest) is None
        assert lookup_item(u.tx, T, C, SHOE, 1, h("acme", "x-3")) is None
        with pytest.raises(InvalidIdentity):
            lookup_item(u.tx, T, C, SHOE, 1, "not-a-hash")


def test_strong_identifiers_narrow_but_never_match_alone(
    uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    add(uow, "a", brand="ACME", mpn="X-1", gtin=EAN13)
    add(uow, "c", brand="ACME", mpn="X-2")
    add(uow, "e", brand="ACME", mpn="X-3", gtin=OTHER_EAN13)
    gen = new_generation(uow)
    approve(uow, gen)
    assert find(uow, gen, h("acme", "x-1"), ean=EAN13) == "a"
    assert find(uow, gen, h("acme", "x-1"), gtin="0" + EAN13) == "a"
    # The holder carries another GTIN: no match.
    assert find(uow, gen, h("acme", "x-1"), gtin=OTHER_EAN13) is None
    # The holder carries none, but another item carries the claimed one: no match.
    assert find(uow, gen, h("acme", "x-2"), gtin=OTHER_EAN13) is None
    assert find(uow, gen, h("acme", "x-2"), gtin=EAN13) is None
    # Unknown to every item, or unusable: it narrows nothing.
    assert find(uow, gen, h("acme", "x-2"), gtin="96385074") == "c"
    assert find(uow, gen, h("acme", "x-2"), gtin="garbage") == "c"
    # A strong identifier without the key never matches.
    assert find(uow, gen, h("nobody", "x-9"), gtin=EAN13) is None
    with uow() as u:
        found = lookup(u.tx, T, C, SHOE, gen, h("acme", "x-1"), {"upc": OTHER_EAN13})
    assert (found.outcome, found.item_id, found.conflicts) == ("strong_id_conflict", "a", ("gtin",))
