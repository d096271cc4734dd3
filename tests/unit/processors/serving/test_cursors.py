"""Page cursors round-trip, and anything but a cursor issued for the same listing and
filters is refused with ``CURSOR_INVALID``."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processors.serving import cursors
from processors.serving.cursors import Cursor
from processors.serving.exceptions import CursorInvalid

ITEMS = cursors.binding("items", [None])
texts = st.text(max_size=50)
int8 = st.integers(-(2**63), 2**63 - 1)
ranks = st.floats(allow_nan=False, allow_infinity=False)


@given(item_id=texts, generation=int8)
def test_an_item_cursor_round_trips(item_id: str, generation: int) -> None:
    cursor = Cursor(ITEMS, (item_id,), generation)
    assert cursors.decode(cursors.encode(cursor), ITEMS, (str,)) == cursor


@given(rank=ranks, item_id=texts, q=texts)
def test_a_search_cursor_round_trips_its_rank_exactly(rank: float, item_id: str, q: str) -> None:
    bound = cursors.binding("search", [q, None])
    cursor = Cursor(bound, (rank, item_id), 1)
    decoded = cursors.decode(cursors.encode(cursor), bound, (float, str))
    assert decoded == cursor
    assert decoded.after[0] == rank  # keyset pages compare ranks with =


@given(policy=texts, version=int8)
def test_a_policy_cursor_round_trips(policy: str, version: int) -> None:
    bound = cursors.binding("shipping-policies", ["DE", None])
    cursor = Cursor(bound, (policy, version), 3)
    assert cursors.decode(cursors.encode(cursor), bound, (str, int)) == cursor


def test_the_cursor_is_url_safe_and_unpadded() -> None:
    text = cursors.encode(Cursor(ITEMS, ("a/b?c=d&e ü",), 1))
    assert set(text) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_the_binding_tells_listings_and_filters_apart() -> None:
    assert (
        len(
            {
                cursors.binding("items", [None]),
                cursors.binding("items", ["active"]),
                cursors.binding("search", ["boot", None]),
                cursors.binding("search", ["boot", "active"]),
                cursors.binding("search", ["boot active", None]),
            }
        )
        == 5
    )
    assert cursors.binding("items", ["active"]) == cursors.binding("items", ["active"])


def _raw(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not base64 !",
        "e30",  # {}
        _raw([1, ITEMS, ["a"]]),  # too short
        _raw([2, ITEMS, ["a"], 1]),  # another version
        _raw([1, ITEMS, "a", 1]),  # a key that is no list
        _raw([1, ITEMS, ["a", "b"], 1]),  # a key of another shape
        _raw([1, ITEMS, [7], 1]),  # a number where the item id goes
        _raw([1, ITEMS, ["a"], True]),  # a generation that is no integer
        _raw([1, ITEMS, ["a"], 2**63]),  # beyond bigint
        _raw([1, cursors.binding("items", ["active"]), ["a"], 1]),  # other filters
        base64.urlsafe_b64encode(b'[1, "x", [NaN], 1]').decode(),
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),
    ],
)
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(CursorInvalid) as raised:
        cursors.decode(text, ITEMS, (str,))
    assert raised.value.code == "CURSOR_INVALID"
    assert raised.value.http_status == 400


def test_a_rank_may_come_back_as_an_integer() -> None:
    bound = cursors.binding("search", ["q", None])
    assert cursors.decode(_raw([1, bound, [0, "a"], 1]), bound, (float, str)).after == (0.0, "a")
