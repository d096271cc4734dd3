"""The attribute rules as plain functions: canonical values per type, applicability
through a lineage, and what a definition or class may look like (no database)."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from producers.resolver.attributes.facts import DefineAttribute, DefineClass
from producers.resolver.attributes.rules import MAX_NUMBER_DIGITS, applies, canonical_value
from producers.resolver.exceptions import (
    AttributeDefinitionInvalid,
    AttributeValueInvalid,
    InvalidClass,
)

# The canonical number form, as PostgreSQL's attribute_value_fits states it
# (migration resolver_0005at); the integration tests check the two agree.
CANONICAL_NUMBER = re.compile(r"^(0|-?(0\.[0-9]*[1-9]|[1-9][0-9]*(\.[0-9]*[1-9])?))$")


def _in_range(d: Decimal) -> bool:
    digits = d.as_tuple().digits
    significant = len(str(int("".join(map(str, digits)))).rstrip("0") or "0")
    return d.is_zero() or (abs(d.adjusted()) <= 40 and significant <= MAX_NUMBER_DIGITS)


decimals = st.decimals(allow_nan=False, allow_infinity=False).filter(_in_range)
long_decimals = st.integers(10**30, 10**59).map(lambda n: Decimal(f"{n}E-20"))
small_ints = st.integers(min_value=-(10**40), max_value=10**40)
finite_floats = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e40, max_value=1e40)
finite_floats = finite_floats.filter(lambda f: f == 0 or abs(f) >= 1e-40)


@given(st.one_of(decimals, long_decimals, small_ints, finite_floats, decimals.map(str)))
def test_a_number_is_stored_as_the_canonical_text_of_the_same_value(
    raw: Decimal | int | float | str,
) -> None:
    text = canonical_value("number", (), raw)
    assert CANONICAL_NUMBER.fullmatch(text), text
    expected = Decimal(repr(raw)) if isinstance(raw, float) else Decimal(raw)
    assert Decimal(text) == expected
    assert canonical_value("number", (), text) == text  # canonical is a fixed point


@pytest.mark.parametrize(
    ("raw", "text"),
    [("1.50", "1.5"), ("-0", "0"), ("-0.000", "0"), (100, "100"), (1e2, "100"), ("1E+3", "1000")],
)
def test_numbers_lose_exponents_trailing_zeros_and_negative_zero(
    raw: str | int | float, text: str
) -> None:
    assert canonical_value("number", (), raw) == text


@pytest.mark.parametrize(
    "raw",
    [True, False, "", "one", "NaN", "-Infinity", float("nan"), float("inf"), "1e61", "1e-61",
     5e-277, "1" * (MAX_NUMBER_DIGITS + 1), "0." + "1" * (MAX_NUMBER_DIGITS + 1)],
)  # fmt: skip
def test_what_is_not_a_finite_number_is_refused(raw: object) -> None:
    with pytest.raises(AttributeValueInvalid) as caught:
        canonical_value("number", (), raw)  # type: ignore[arg-type]
    assert caught.value.code == "ATTRIBUTE_VALUE_INVALID"


def test_booleans_enums_and_text() -> None:
    assert canonical_value("boolean", (), True) == "true"
    assert canonical_value("boolean", (), "false") == "false"
    assert canonical_value("enum", ("red", "blue"), "blue") == "blue"
    assert canonical_value("text", (), " runs small ") == " runs small "
    for value_type, allowed, raw in [
        ("boolean", (), "True"),
        ("boolean", (), 0),
        ("enum", ("red",), "Red"),
        ("enum", ("red",), 1),
        ("text", (), ""),
        ("text", (), "a\x00b"),
        ("text", (), 3.5),
        ("date", (), "2027-01-01"),
    ]:
        with pytest.raises(AttributeValueInvalid):
            canonical_value(value_type, allowed, raw)  # type: ignore[arg-type]


classes = st.text(alphabet="abcdef", min_size=1, max_size=3)


@given(st.lists(classes, min_size=1, max_size=6, unique=True), st.sets(classes, max_size=4))
def test_a_definition_applies_when_it_names_the_class_or_an_ancestor(
    lineage: list[str], applies_to: set[str]
) -> None:
    assert applies(lineage, applies_to) == any(c in applies_to for c in lineage)
    assert applies(lineage, {lineage[-1]})  # the root reaches every descendant
    assert not applies(lineage, set())


def _definition(**changes: object) -> DefineAttribute:
    fields: dict[str, object] = {
        "attribute_key": "fit",
        "version": 1,
        "label": "Fit",
        "value_type": "enum",
        "applies_to": ("shoe",),
        "allowed_values": ("narrow", "wide"),
    }
    fields.update(changes)
    return DefineAttribute(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "changes",
    [
        {"attribute_key": "fit/1"},
        {"attribute_key": "-fit"},
        {"attribute_key": "f" * 101},
        {"version": 0},
        {"version": 2**31},
        {"label": ""},
        {"label": "x" * 1001},
        {"value_type": "list"},
        {"allowed_values": ()},
        {"allowed_values": ("wide", "wide")},
        {"allowed_values": ("",)},
        {"value_type": "text"},  # with allowed values
        {"applies_to": ()},
        {"applies_to": ("",)},
        {"applies_to": ("shoe", "shoe")},
    ],
)
def test_a_malformed_definition_is_refused_before_any_io(changes: dict[str, object]) -> None:
    with pytest.raises(AttributeDefinitionInvalid) as caught:
        _definition(**changes)
    assert caught.value.code == "ATTRIBUTE_DEFINITION_INVALID"


def test_a_well_formed_definition_and_class() -> None:
    assert _definition(attribute_key="shoe.fit:eu_2").attribute_key == "shoe.fit:eu_2"
    assert _definition(value_type="number", allowed_values=()).value_type == "number"
    assert DefineClass("sneaker", "shoe").parent_class_id == "shoe"
    for bad in (("",), ("shoe", "shoe"), ("shoe", ""), ("a\x00",)):
        with pytest.raises(InvalidClass):
            DefineClass(*bad)
