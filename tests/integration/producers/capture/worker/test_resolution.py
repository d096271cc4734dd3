"""Identity resolution of captured products: the generation pinned at the capture's
arrival, strong identifiers, and what goes to a reviewer instead of a decision."""

from __future__ import annotations

from typing import Any

import psycopg.errors
import pytest

from db.repositories import identity as identity_rows
from producers.resolver.identity import IdentityRule

from .conftest import Harness, Parser, product

GTIN_A = "4006381333931"
GTIN_B = "4006381333924"


def with_gtin(sku: str, gtin: str, **extra: Any) -> dict[str, Any]:
    return {**product(sku), "gtin": gtin, **extra}


def test_the_generation_is_pinned_at_the_captures_arrival(harness: Harness) -> None:
    """A capture that arrived before the class had a generation goes to review, and
    its replay still does after the activation; a later capture resolves."""
    harness.bind()
    early = harness.capture([product("a")])
    harness.activate()
    late = harness.capture([product("a")])
    assert harness.worker().run(early.job_id).result == "done"
    assert harness.worker().run(late.job_id).result == "done"
    assert harness.results(early)["a"][:3] == ("review", 0, "NO_ACTIVE_GENERATION")
    assert harness.results(late)["a"][0] == "applied"


def test_a_replay_resolves_in_the_generation_pinned_the_first_time(
    harness: Harness, monkeypatch: Any
) -> None:
    """The pin is recorded, not recomputed: an activation whose transaction began
    before the capture arrived but committed after it (emulated by moving its
    activation time back) does not change what a replay of the capture resolves in."""
    from producers.capture.adapters.json_feed import JsonFeedAdapter
    from producers.capture.worker.replays import request_replay

    harness.bind()
    early = harness.capture([product("a")])
    assert harness.worker().run(early.job_id).result == "done"
    assert harness.results(early)["a"][:3] == ("review", 0, "NO_ACTIVE_GENERATION")
    generation = harness.activate()
    with harness.conn() as conn:
        conn.execute(
            "UPDATE identity_generation SET activated_at = c.created_at - interval '1 second'"
            " FROM capture c WHERE c.capture_id = %s AND identity_generation = %s",
            (early.capture_id, generation),
        )
        pins = conn.execute(
            "SELECT class_id, identity_generation FROM capture_identity_pin WHERE capture_id = %s",
            (early.capture_id,),
        ).fetchall()
    assert pins == [("shoe", None)]
    monkeypatch.setattr(JsonFeedAdapter, "parser_version", 2)
    with harness.conn() as conn:
        replay = request_replay(conn, "t1", early.capture_id, "ana").job_id
    assert harness.worker(parse=Parser(parser_version=2)).run(replay).outcomes == {"review": 1}
    # A capture arriving now resolves in the (back-dated) generation as usual.
    late = harness.capture([product("a")])
    assert harness.worker().run(late.job_id).outcomes == {"applied": 1}


def test_a_product_without_the_rule_fields_goes_to_review(harness: Harness) -> None:
    harness.bind()
    harness.activate(rule=IdentityRule(("brand", "mpn")))
    job = harness.capture(
        [{**product("a"), "brand": "Acme"}, {**product("b"), "brand": "Acme", "mpn": "B-1"}]
    )
    assert harness.worker().run(job.job_id).result == "done"
    results = harness.results(job)
    assert results["a"][:3] == ("review", 0, "NO_IDENTITY")
    assert results["b"][0] == "applied"


def test_contradicting_strong_identifiers_go_to_review(harness: Harness) -> None:
    harness.bind()
    harness.activate()
    first = harness.capture([with_gtin("a", GTIN_A)])
    assert harness.worker().run(first.job_id).result == "done"
    # Same sku, another GTIN: the key matches an item whose GTIN says otherwise.
    # Another sku, a GTIN already held: no key, but the strong id belongs to a.
    second = harness.capture([with_gtin("a", GTIN_B, id="a2"), with_gtin("b", GTIN_A)])
    assert harness.worker().run(second.job_id).result == "done"
    results = harness.results(second)
    assert results["a2"][:3] == ("review", 0, "STRONG_ID_CONFLICT")
    assert results["b"][:3] == ("review", 0, "STRONG_ID_HELD")
    state = harness.snapshot()
    assert len(state["items"]) == 1
    assert sorted(c[2] for c in state["cases"]) == ["shop:a2", "shop:b"]


def test_two_listings_of_one_identity_map_onto_one_item(harness: Harness) -> None:
    harness.bind()
    harness.activate()
    job = harness.capture([product("a"), {**product("a"), "id": "a-eu"}])
    assert harness.worker().run(job.job_id).result == "done"
    item = harness.item("a")
    assert {k: v[0] for k, v in harness.results(job).items()} == {
        "a": "applied",
        "a-eu": "applied",  # the mapping of the second listing
    }
    state = harness.snapshot()
    assert [i[0] for i in state["items"]] == [item]
    assert sorted((m[0], m[1]) for m in state["mappings"]) == [
        ("shop:a", item),
        ("shop:a-eu", item),
    ]


def test_a_retired_item_is_for_a_reviewer(harness: Harness) -> None:
    from producers.resolver.catalog_items import RetireItem
    from tests.fixtures.decisions import accept

    harness.bind()
    harness.activate()
    first = harness.capture([product("a")])
    assert harness.worker().run(first.job_id).result == "done"
    with harness.uow() as u:
        accept(u, "t1", "c1", RetireItem(harness.item("a"), "discontinued"))
    second = harness.capture([product("a", "back again")])
    assert harness.worker().run(second.job_id).result == "done"
    assert harness.results(second)["a"][:3] == ("review", 0, "ITEM_NOT_ACTIVE")


def test_a_batch_reads_its_pinned_generations_at_once_share_locked(harness: Harness) -> None:
    """``pinned_for_share``, what a batch's read-ahead asks: the generation each class
    of the capture is pinned to, share-locked until the transaction ends (as a key's
    assignment locks it); a class pinned to no generation, or not pinned, is left out."""
    harness.bind()
    early = harness.capture([product("a")])
    assert harness.worker().run(early.job_id).result == "done"  # pinned to none
    generation = harness.activate()
    late = harness.capture([product("a"), product("b")])
    assert harness.worker().run(late.job_id).outcomes == {"applied": 2}
    with harness.uow() as u:
        assert identity_rows.pinned_for_share(u.tx, "t1", "c1", early.capture_id, ["shoe"]) == {}
        found = identity_rows.pinned_for_share(u.tx, "t1", "c1", late.capture_id, ["boot", "shoe"])
        assert list(found) == ["shoe"]
        assert (found["shoe"].key.generation, found["shoe"].status) == (generation, "active")
        with harness.conn() as other, pytest.raises(psycopg.errors.LockNotAvailable):
            other.execute(
                "SELECT 1 FROM identity_generation WHERE tenant_id = 't1' AND class_id = 'shoe'"
                " AND identity_generation = %s FOR UPDATE NOWAIT",
                (generation,),
            )
