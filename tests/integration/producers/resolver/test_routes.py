"""The resolver's operator endpoints against real PostgreSQL: review cases, decisions
(one of two racing on a case revision wins), an item's history, splits, and every
error as ``{"code", "message"}`` with its stable code."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import psycopg
import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from db.settings import DatabaseSettings
from producers.api import create_app
from producers.resolver.review_cases import open_case
from producers.settings import ApiSettings
from schemas.codec import CODEC
from schemas.http.auth import token_hash
from tests.integration.producers.resolver.conftest import (
    UowFactory,
    add_item,
    assert_contiguous_outbox,
)

T1_TOKEN = "token-of-tenant-t1"
CATALOG = "/v1/tenants/t1/catalogs/c1"
EVIDENCE = [{"capture_id": "cap-1", "locator": "$.offers[0]"}]


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture()
def api_settings(clean_db: DatabaseSettings) -> ApiSettings:
    return ApiSettings(
        api_tokens=SecretStr(f"{token_hash(T1_TOKEN)}:t1"),
        resolver_dsn=clean_db.resolver_dsn,
        control_dsn=clean_db.control_dsn,
    )


@pytest.fixture()
def client(api_settings: ApiSettings) -> Iterator[TestClient]:
    with TestClient(create_app(api_settings), headers=auth(T1_TOKEN)) as test_client:
        yield test_client


def error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert set(body) == {"code", "message"} and body["code"] == code, body
    assert body["message"]
    return body


def ok(response: httpx.Response, status: int = 200) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    return body


def open_cases(uow: UowFactory, *case_ids: str, subject: str = "L1") -> None:
    with uow() as u:
        for case_id in case_ids:
            open_case(u, "t1", "c1", case_id, "listing", subject)
        u.commit()


def decision(revision: int = 1, *facts: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {
        "expected_revision": revision,
        "action": "accept",
        "actor": "reviewer:ana",
        "rationale": "the capture shows the same product",
        "evidence": EVIDENCE,
        "facts": list(facts),
        **changes,
    }


def map_listing(listing: str, item: str) -> dict[str, Any]:
    return {"kind": "map_listing", "listing_id": listing, "item_id": item}


def outbox(dsn: str) -> list[tuple[int, str, str, int]]:
    """(position, aggregate type, id, revision) of the t1/c1 outbox, decoded."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT position, value FROM outbox WHERE tenant_id = 't1' AND catalog_id = 'c1'"
            " ORDER BY position"
        ).fetchall()
    events = [(p, CODEC.decode_value(v)) for p, v in rows]
    assert all(p == e.position for p, e in events)
    return [(p, e.aggregate.type, e.aggregate.id, e.aggregate.revision) for p, e in events]


def race(*requests: Callable[..., httpx.Response]) -> list[httpx.Response]:
    """Send the requests together, each from its own thread."""
    barrier = threading.Barrier(len(requests))
    responses: list[httpx.Response | None] = [None] * len(requests)

    def send(i: int) -> None:
        barrier.wait()
        responses[i] = requests[i]()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [r for r in responses if r is not None]


# --- review cases ----------------------------------------------------------------------


def test_cases_are_listed_in_pages_and_read_with_their_decisions(
    client: TestClient, uow: UowFactory
) -> None:
    open_cases(uow, "case-1", "case-2", "case-3")
    ok(client.post(f"{CATALOG}/review-cases/case-2/decisions", json=decision()), 201)

    first = ok(client.get(f"{CATALOG}/review-cases", params={"status": "open", "limit": 1}))
    assert [c["case_id"] for c in first["cases"]] == ["case-1"]
    assert first["next_after"] == "case-1"
    second = ok(
        client.get(
            f"{CATALOG}/review-cases", params={"status": "open", "limit": 1, "after": "case-1"}
        )
    )
    assert [c["case_id"] for c in second["cases"]] == ["case-3"]
    last = ok(
        client.get(
            f"{CATALOG}/review-cases", params={"status": "open", "limit": 1, "after": "case-3"}
        )
    )
    assert last == {"cases": [], "next_after": None}
    every = ok(client.get(f"{CATALOG}/review-cases"))
    assert [(c["case_id"], c["status"], c["revision"]) for c in every["cases"]] == [
        ("case-1", "open", 1),
        ("case-2", "decided", 2),
        ("case-3", "open", 1),
    ]
    assert every["next_after"] is None

    case = ok(client.get(f"{CATALOG}/review-cases/case-2"))
    assert (case["status"], case["revision"], case["subject_id"]) == ("decided", 2, "L1")
    [made] = case["decisions"]
    assert (made["action"], made["actor"], made["case_revision"]) == ("accept", "reviewer:ana", 1)
    assert made["evidence"] == EVIDENCE and made["prior_decision_ids"] == []
    assert ok(client.get(f"{CATALOG}/review-cases/case-1"))["decisions"] == []


def test_page_size_is_bounded(client: TestClient) -> None:
    for limit in (0, 201):
        error(
            client.get(f"{CATALOG}/review-cases", params={"limit": limit}), 422, "VALIDATION_FAILED"
        )
    error(client.get(f"{CATALOG}/review-cases", params={"status": "x"}), 422, "VALIDATION_FAILED")


# --- decisions -------------------------------------------------------------------------


def test_a_decision_commits_its_facts_and_contiguous_outbox_rows(
    client: TestClient, uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    add_item(uow, "i1")
    open_cases(uow, "case-1")
    policy = {
        "kind": "shipping_policy_version",
        "policy_id": "std",
        "scope": "DE",
        "effective_from": "2027-01-01T00:00:00Z",
        "terms": {"rate": "4.90"},
    }
    body = ok(
        client.post(
            f"{CATALOG}/review-cases/case-1/decisions",
            json=decision(1, map_listing("L1", "i1"), policy),
        ),
        201,
    )
    assert body["case_revision"] == 2
    decision_id = body["decision_id"]
    assert [(a["type"], a["id"], a["revision"]) for a in body["aggregates"]] == [
        ("decision", decision_id, 1),
        ("listing_mapping", "L1", 1),
        ("shipping_policy", "std", 1),
    ]
    # After the rule decision that created i1 and its item event.
    assert outbox(clean_db.resolver_dsn)[1:] == [
        (2, "catalog_item", "i1", 1),
        (3, "decision", decision_id, 1),
        (4, "listing_mapping", "L1", 1),
        (5, "shipping_policy", "std", 1),
    ]
    assert_contiguous_outbox(clean_db.resolver_dsn)
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        mapping = conn.execute("SELECT item_id, decision_id::text FROM listing_mapping").fetchone()
    assert mapping == ("i1", decision_id)

    # A correction names the decision it corrects; the case moves on by one.
    correction = decision(2, action="correct", prior_decision_ids=[decision_id])
    ok(client.post(f"{CATALOG}/review-cases/case-1/decisions", json=correction), 201)
    case = ok(client.get(f"{CATALOG}/review-cases/case-1"))
    assert case["revision"] == 3
    assert [d["prior_decision_ids"] for d in case["decisions"]] == [[], [decision_id]]


def test_two_decisions_on_one_case_revision_exactly_one_wins(
    api_settings: ApiSettings, uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    """Two API processes (apps with their own pools), each deciding every case at
    revision 1 at the same moment."""
    rounds = 8
    open_cases(uow, *(f"case-{n}" for n in range(rounds)))
    with (
        TestClient(create_app(api_settings), headers=auth(T1_TOKEN)) as a,
        TestClient(create_app(api_settings), headers=auth(T1_TOKEN)) as b,
    ):
        for n in range(rounds):
            url = f"{CATALOG}/review-cases/case-{n}/decisions"
            done = race(
                lambda url=url: a.post(url, json=decision(actor="reviewer:a")),
                lambda url=url: b.post(url, json=decision(actor="reviewer:b")),
            )
            assert sorted(r.status_code for r in done) == [201, 409], [r.text for r in done]
            [lost] = [r for r in done if r.status_code == 409]
            error(lost, 409, "STALE_REVISION")
            case = ok(a.get(f"{CATALOG}/review-cases/case-{n}"))
            assert case["revision"] == 2 and len(case["decisions"]) == 1
    assert [row[1] for row in outbox(clean_db.resolver_dsn)] == ["decision"] * rounds
    assert_contiguous_outbox(clean_db.resolver_dsn)


def test_a_stale_revision_is_409_and_changes_nothing(
    client: TestClient, uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    open_cases(uow, "case-1")
    url = f"{CATALOG}/review-cases/case-1/decisions"
    ok(client.post(url, json=decision(1)), 201)
    error(client.post(url, json=decision(1)), 409, "STALE_REVISION")
    error(client.post(url, json=decision(3)), 409, "STALE_REVISION")
    assert len(outbox(clean_db.resolver_dsn)) == 1


def test_invariant_violations_answer_their_codes_and_roll_back(
    client: TestClient, uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    add_item(uow, "i1")
    open_cases(uow, "case-1")
    url = f"{CATALOG}/review-cases/case-1/decisions"
    error(
        client.post(url, json=decision(1, map_listing("L1", "i1"), map_listing("L2", "gone"))),
        409,
        "TARGET_NOT_ACTIVE",
    )
    window = {
        "kind": "shipping_policy_version",
        "policy_id": "std",
        "scope": "DE",
        "effective_from": "2027-03-01T00:00:00Z",
        "effective_to": "2027-01-01T00:00:00Z",
    }
    error(client.post(url, json=decision(1, window)), 422, "INVALID_POLICY_WINDOW")
    unknown_prior = decision(1, prior_decision_ids=["6b0f5a4e-8f7e-4a53-9b8e-3d2c1b0a9f8e"])
    error(client.post(url, json=unknown_prior), 422, "PRIOR_DECISION_NOT_FOUND")
    # Nothing of the refused decisions stayed: the case is still at revision 1.
    assert ok(client.get(f"{CATALOG}/review-cases/case-1"))["revision"] == 1
    assert len(outbox(clean_db.resolver_dsn)) == 2  # the item's and its decision's
    ok(client.post(url, json=decision(1, map_listing("L1", "i1"))), 201)


def test_a_decision_without_evidence_or_with_bad_fields_is_422(
    client: TestClient, uow: UowFactory
) -> None:
    open_cases(uow, "case-1")
    url = f"{CATALOG}/review-cases/case-1/decisions"
    for body in (
        decision(evidence=[]),
        decision(evidence=[{"capture_id": "cap-1", "locator": ""}]),
        decision(expected_revision=0),
        decision(1, {"kind": "rename_item", "item_id": "i1"}),
        {k: v for k, v in decision().items() if k != "actor"},
    ):
        error(client.post(url, json=body), 422, "VALIDATION_FAILED")
    assert ok(client.get(f"{CATALOG}/review-cases/case-1"))["revision"] == 1


@pytest.mark.parametrize(
    ("effective_from", "effective_to"),
    [
        ("0001-01-01T00:00:00+14:00", None),
        ("2027-01-01T00:00:00Z", "9999-12-31T23:59:59-14:00"),
    ],
)
def test_a_time_outside_years_1_to_9999_in_utc_is_422_and_changes_nothing(
    client: TestClient,
    uow: UowFactory,
    clean_db: DatabaseSettings,
    effective_from: str,
    effective_to: str | None,
) -> None:
    open_cases(uow, "case-1")
    window = {
        "kind": "shipping_policy_version",
        "policy_id": "std",
        "scope": "DE",
        "effective_from": effective_from,
        "effective_to": effective_to,
    }
    url = f"{CATALOG}/review-cases/case-1/decisions"
    body = error(client.post(url, json=decision(1, window)), 422, "VALIDATION_FAILED")
    assert "UTC" in body["message"]
    assert ok(client.get(f"{CATALOG}/review-cases/case-1"))["revision"] == 1
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM decision").fetchone() == (0,)


def test_a_nul_character_in_an_id_or_a_body_is_422_and_changes_nothing(
    client: TestClient, uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    """PostgreSQL text cannot hold NUL; such input is the caller's error, never a 500."""
    open_cases(uow, "case-1")
    error(client.get(f"{CATALOG}/review-cases/a%00b"), 422, "VALIDATION_FAILED")
    error(client.get(f"{CATALOG}/items/i%00/decisions"), 422, "VALIDATION_FAILED")
    url = f"{CATALOG}/review-cases/case-1/decisions"
    error(client.post(url, json=decision(rationale="a\u0000b")), 422, "VALIDATION_FAILED")
    assert ok(client.get(f"{CATALOG}/review-cases/case-1"))["revision"] == 1
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM decision").fetchone() == (0,)


def test_unknown_case_is_404(client: TestClient) -> None:
    error(client.get(f"{CATALOG}/review-cases/nope"), 404, "CASE_NOT_FOUND")
    error(
        client.post(f"{CATALOG}/review-cases/nope/decisions", json=decision()),
        404,
        "CASE_NOT_FOUND",
    )


def _epochs(settings: DatabaseSettings) -> list[tuple[str, str, int]]:
    with psycopg.connect(settings.control_dsn) as conn:
        rows = conn.execute(
            "SELECT tenant_id, catalog_id, epoch FROM history_epoch"
            " UNION ALL SELECT tenant_id, catalog_id, epoch FROM history_epoch_log"
        ).fetchall()
    return sorted((str(t), str(c), int(e)) for t, c, e in rows)


def test_a_refused_decision_issues_no_history_epoch(
    client: TestClient, uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    """Only an accepted write (or an operator) issues a catalog's first epoch: junk
    requests must not grow the control database."""
    for catalog in ("c1", "junk-7f3a", "x" * 200):
        url = f"/v1/tenants/t1/catalogs/{catalog}/review-cases/nope/decisions"
        error(client.post(url, json=decision()), 404, "CASE_NOT_FOUND")
    open_cases(uow, "case-1")
    url = f"{CATALOG}/review-cases/case-1/decisions"
    window = {
        "kind": "shipping_policy_version",
        "policy_id": "std",
        "scope": "DE",
        "effective_from": "2027-03-01T00:00:00Z",
        "effective_to": "2027-01-01T00:00:00Z",
    }
    error(client.post(url, json=decision(1, window)), 422, "INVALID_POLICY_WINDOW")
    assert _epochs(clean_db) == []
    window["effective_to"] = "2027-06-01T00:00:00Z"
    ok(client.post(url, json=decision(1, window)), 201)
    assert _epochs(clean_db) == [("t1", "c1", 1), ("t1", "c1", 1)]


def test_another_tenant_is_403_and_no_token_401(client: TestClient, uow: UowFactory) -> None:
    open_cases(uow, "case-1")
    other = "/v1/tenants/t2/catalogs/c1"
    error(client.get(f"{other}/review-cases"), 403, "TENANT_SCOPE_DENIED")
    error(client.get(f"{other}/review-cases/case-1"), 403, "TENANT_SCOPE_DENIED")
    error(
        client.post(f"{other}/review-cases/case-1/decisions", json=decision()),
        403,
        "TENANT_SCOPE_DENIED",
    )
    error(client.get(f"{other}/items/i1/decisions"), 403, "TENANT_SCOPE_DENIED")
    error(client.post(f"{other}/items/i1/split", json=split_body()), 403, "TENANT_SCOPE_DENIED")
    for headers in ({"Authorization": ""}, auth("not-a-token")):
        error(client.get(f"{CATALOG}/review-cases", headers=headers), 401, "UNAUTHENTICATED")


# --- items: splits and decision history ----------------------------------------------------


def split_body(**changes: Any) -> dict[str, Any]:
    return {
        "actor": "reviewer:ana",
        "rationale": "two colours sold as one item",
        "evidence": EVIDENCE,
        "successors": [
            {"item_id": "i1-red", "title": "red"},
            {"item_id": "i1-blue", "title": "blue"},
        ],
        "remaps": {"L1": "i1-red", "L2": "i1-blue"},
        **changes,
    }


def test_a_split_is_a_decision_that_keeps_the_source(
    client: TestClient, uow: UowFactory, clean_db: DatabaseSettings
) -> None:
    add_item(uow, "i1")
    open_cases(uow, "map-1")
    mapped = ok(
        client.post(
            f"{CATALOG}/review-cases/map-1/decisions",
            json=decision(1, map_listing("L1", "i1"), map_listing("L2", "i1")),
        ),
        201,
    )["decision_id"]
    with uow() as u:
        open_case(u, "t1", "c1", "split-1", "catalog_item", "i1")
        u.commit()
    url = f"{CATALOG}/items/i1/split"

    error(client.post(url, json=split_body(remaps={"L1": "i1-red"})), 422, "INVALID_SPLIT")
    error(client.post(url, json=split_body(successors=[])), 422, "VALIDATION_FAILED")
    error(
        client.post(f"{CATALOG}/items/nope/split", json=split_body(remaps={})),
        404,
        "ITEM_NOT_FOUND",
    )
    stale = split_body(case={"case_id": "split-1", "expected_revision": 2})
    error(client.post(url, json=stale), 409, "STALE_REVISION")

    body = split_body(
        case={"case_id": "split-1", "expected_revision": 1}, prior_decision_ids=[mapped]
    )
    done = ok(client.post(url, json=body), 201)
    assert done["case_revision"] == 2
    assert [(a["type"], a["id"], a["revision"]) for a in done["aggregates"][:6]] == [
        ("decision", done["decision_id"], 1),
        ("catalog_item", "i1", 2),
        ("catalog_item", "i1-red", 1),
        ("catalog_item", "i1-blue", 1),
        ("listing_mapping", "L1", 2),
        ("listing_mapping", "L2", 2),
    ]
    assert done["aggregates"][6]["type"] == "item_split"
    error(client.post(url, json=split_body(remaps={})), 409, "SOURCE_NOT_ACTIVE")
    with psycopg.connect(clean_db.resolver_dsn) as conn:
        items = conn.execute("SELECT item_id, status FROM catalog_item ORDER BY item_id").fetchall()
        actions = conn.execute("SELECT action FROM decision ORDER BY decided_at").fetchall()
    assert items == [("i1", "split"), ("i1-blue", "active"), ("i1-red", "active")]
    assert actions == [("accept",), ("accept",), ("split",)]  # i1's, the mapping, the split
    assert_contiguous_outbox(clean_db.resolver_dsn)


def test_an_items_decision_history(client: TestClient, uow: UowFactory) -> None:
    created_1 = add_item(uow, "i1")
    created_2 = add_item(uow, "i2")
    open_cases(uow, "map-1", "map-2")
    mapped = ok(
        client.post(
            f"{CATALOG}/review-cases/map-1/decisions",
            json=decision(1, map_listing("L1", "i1"), map_listing("L2", "i1")),
        ),
        201,
    )["decision_id"]
    other = ok(
        client.post(
            f"{CATALOG}/review-cases/map-2/decisions", json=decision(1, map_listing("L9", "i2"))
        ),
        201,
    )["decision_id"]
    with uow() as u:
        open_case(u, "t1", "c1", "look-1", "catalog_item", "i1")
        u.commit()
    looked = ok(
        client.post(f"{CATALOG}/review-cases/look-1/decisions", json=decision(action="keep")),
        201,
    )["decision_id"]
    split = ok(client.post(f"{CATALOG}/items/i1/split", json=split_body()), 201)["decision_id"]
    open_cases(uow, "move-9")
    moved = ok(
        client.post(
            f"{CATALOG}/review-cases/move-9/decisions",
            json=decision(1, map_listing("L9", "i1-red")),
        ),
        201,
    )["decision_id"]

    history = ok(client.get(f"{CATALOG}/items/i1/decisions"))
    assert history["item_id"] == "i1"
    # The split moved L1 and L2 to the successors; the decision that mapped them
    # onto i1 is still part of i1's history, beside its case and its split.
    assert [d["decision_id"] for d in history["decisions"]] == [created_1, mapped, looked, split]
    red = ok(client.get(f"{CATALOG}/items/i1-red/decisions"))
    assert [d["decision_id"] for d in red["decisions"]] == [split, moved]
    # L9 left i2 by a plain remap; the decision that had mapped it there stays.
    assert [
        d["decision_id"] for d in ok(client.get(f"{CATALOG}/items/i2/decisions"))["decisions"]
    ] == [created_2, other]
    error(client.get(f"{CATALOG}/items/nope/decisions"), 404, "ITEM_NOT_FOUND")


def test_the_endpoints_are_documented(client: TestClient) -> None:
    paths = ok(client.get("/openapi.json"))["paths"]
    case = "/v1/tenants/{tenant_id}/catalogs/{catalog_id}/review-cases"
    item = "/v1/tenants/{tenant_id}/catalogs/{catalog_id}/items/{item_id}"
    assert set(paths[case]) == {"get"}
    assert set(paths[case + "/{case_id}"]) == {"get"}
    decide = paths[case + "/{case_id}/decisions"]["post"]
    assert {"201", "401", "403", "404", "409", "422"} <= set(decide["responses"])
    assert set(paths[item + "/decisions"]) == {"get"}
    assert set(paths[item + "/split"]) == {"post"}
