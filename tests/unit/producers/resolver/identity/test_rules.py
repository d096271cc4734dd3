"""The pure identity rules: normalization, GTIN canonical form, the identity hash,
strong identifiers, rule validation, fields no item can have."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from producers.resolver.exceptions import InvalidIdentity
from producers.resolver.identity.facts import AssignIdentity, ResolveCollision
from producers.resolver.identity.rules import (
    IdentityRule,
    fields_no_item_has,
    gtin_check_digit_valid,
    identity_hash,
    normalize_claim,
    normalize_gtin,
    normalize_strong_id,
    normalize_text,
    strong_ids_of,
)

BRAND_MPN = IdentityRule(("brand", "mpn"))
GTIN = IdentityRule(("gtin",))

# Published examples: an EAN-13, a UPC-A and an EAN-8 with correct check digits.
EAN13 = "4006381333931"
UPCA = "036000291452"
EAN8 = "96385074"

texts = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)


def with_check_digit(body: str) -> str:
    """``body`` (13 digits) plus the digit that makes it a valid GTIN-14."""
    for digit in "0123456789":
        if gtin_check_digit_valid(body + digit):
            return body + digit
    raise AssertionError("one check digit always fits")


def test_text_is_trimmed_collapsed_and_casefolded() -> None:
    assert normalize_text("  ACME \t  Corp\n") == "acme corp"
    assert normalize_text("Straße") == normalize_text("STRASSE") == "strasse"
    assert normalize_text("\uff21\uff23\uff2d\uff25") == "acme"  # NFKC folds full-width ACME
    assert normalize_text(" \t\n") is None


@pytest.mark.parametrize("gtin", [EAN13, UPCA, EAN8])
def test_a_gtin_is_padded_to_fourteen_digits(gtin: str) -> None:
    assert normalize_gtin(gtin) == gtin.zfill(14)
    assert normalize_gtin("00" + gtin.zfill(14)) == gtin.zfill(14)
    assert normalize_gtin(f" {gtin[:4]}-{gtin[4:]} ") == gtin.zfill(14)


def test_an_invalid_gtin_gives_nothing() -> None:
    wrong_check = EAN13[:-1] + str((int(EAN13[-1]) + 1) % 10)
    too_short = "123"  # its check digit would fit, but no GTIN has three digits
    for value in (wrong_check, too_short, "", "00000000", "40063813339a1", "٤٠٠٦٣٨١٣٣٣٩٣١"):
        assert normalize_gtin(value) is None, value


@given(st.text(alphabet="0123456789", min_size=13, max_size=13).filter(lambda b: b.strip("0")))
def test_every_valid_gtin_has_one_canonical_form(body: str) -> None:
    gtin = with_check_digit(body)
    canonical = normalize_gtin(gtin)
    assert canonical == gtin and len(canonical) == 14
    for shorter in (8, 12, 13):
        if not gtin[:-shorter].strip("0"):  # a GTIN-8/12/13 written in 14 digits
            assert normalize_gtin(gtin[-shorter:]) == canonical
    assert normalize_gtin("00" + gtin) == canonical
    assert normalize_gtin("1" + gtin) is None


def test_the_hash_is_sha256_of_the_normalized_pairs_in_rule_order() -> None:
    expected = hashlib.sha256(
        json.dumps([["brand", "acme"], ["mpn", "x-1"]], separators=(",", ":")).encode()
    ).hexdigest()
    assert identity_hash(BRAND_MPN, {"brand": " ACME ", "mpn": "X-1", "color": "red"}) == expected
    assert identity_hash(IdentityRule(("mpn", "brand")), {"brand": "acme", "mpn": "x-1"}) != (
        expected
    )


def test_missing_blank_or_invalid_fields_give_no_identity() -> None:
    assert identity_hash(BRAND_MPN, {"brand": "acme"}) is None
    assert identity_hash(BRAND_MPN, {"brand": "acme", "mpn": "  "}) is None
    assert identity_hash(GTIN, {"gtin": "4006381333932"}) is None
    assert identity_hash(GTIN, {"gtin": EAN13}) == identity_hash(GTIN, {"gtin": "0" + EAN13})


@given(texts, texts, texts, texts)
def test_the_separator_is_unambiguous(a: str, b: str, c: str, d: str) -> None:
    """Different normalized values never share a hash because a separator moved."""
    first = identity_hash(BRAND_MPN, {"brand": a, "mpn": b})
    second = identity_hash(BRAND_MPN, {"brand": c, "mpn": d})
    if first is not None and second is not None:
        same = (normalize_claim("brand", a), normalize_claim("mpn", b)) == (
            normalize_claim("brand", c),
            normalize_claim("mpn", d),
        )
        assert (first == second) == same


@given(texts, texts)
def test_normalizing_is_idempotent(brand: str, mpn: str) -> None:
    once = {"brand": normalize_claim("brand", brand), "mpn": normalize_claim("mpn", mpn)}
    if None not in once.values():
        claims = {k: v for k, v in once.items() if v is not None}
        assert identity_hash(BRAND_MPN, claims) == identity_hash(
            BRAND_MPN, {"brand": brand, "mpn": mpn}
        )


def test_non_text_claims_are_read_or_ignored() -> None:
    assert normalize_claim("gtin", int(EAN13)) == "0" + EAN13
    assert normalize_claim("mpn", True) is None
    assert normalize_claim("mpn", None) is None
    assert normalize_claim("mpn", ["x"]) is None


@pytest.mark.parametrize("fields", [(), ("",), (" brand",), ("brand", "brand")])
def test_a_rule_needs_distinct_non_blank_fields(fields: tuple[str, ...]) -> None:
    with pytest.raises(InvalidIdentity) as raised:
        IdentityRule(fields)
    assert raised.value.code == "INVALID_IDENTITY"


def test_strong_ids_of_the_gtin_family_share_one_scheme() -> None:
    assert normalize_strong_id("EAN", EAN13) == ("gtin", "0" + EAN13)
    assert normalize_strong_id("upc", UPCA) == ("gtin", UPCA.zfill(14))
    assert normalize_strong_id("gtin", "4006381333932") is None
    assert normalize_strong_id("ASIN", " B00X ") == ("asin", "b00x")
    assert normalize_strong_id(" ", "x") is None
    assert strong_ids_of({"ean": EAN13, "gtin": "bad", "mpn": "x", "brand": "acme"}) == {
        "gtin": "0" + EAN13
    }


def test_facts_refuse_a_malformed_hash() -> None:
    good = "a" * 64
    AssignIdentity("i1", "shoe", 1, good)
    for bad in ("A" * 64, "a" * 63, "", "g" * 64):
        with pytest.raises(InvalidIdentity):
            AssignIdentity("i1", "shoe", 1, bad)
        with pytest.raises(InvalidIdentity):
            ResolveCollision("shoe", 1, bad, None)


def test_a_rule_field_counts_when_captures_state_it_or_an_item_carries_it() -> None:
    rule = IdentityRule(("isbn", "brand", "edition", "mpn"))
    claims = frozenset({"title", "brand", "mpn"})
    assert fields_no_item_has(rule, claims, frozenset()) == ("isbn", "edition")
    assert fields_no_item_has(rule, claims, frozenset({"isbn"})) == ("edition",)
    assert fields_no_item_has(BRAND_MPN, claims, frozenset()) == ()
