"""``gapless tail`` renders every payload type as JSON."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

from infra.tail import event_json
from schemas.events import (
    AggregateRef,
    DecisionRecorded,
    Envelope,
    EvidenceRef,
    ShippingPolicyVersioned,
)


def envelope(payload: DecisionRecorded | ShippingPolicyVersioned) -> Envelope:
    return Envelope(
        tenant_id="t",
        catalog_id="c",
        history_epoch=1,
        position=1,
        event_id=uuid.uuid4(),
        aggregate=AggregateRef(type="x", id="x", revision=1),
        occurred_at=datetime(2027, 1, 1, tzinfo=UTC),
        payload=payload,
    )


def test_newer_payloads_render_as_plain_json() -> None:
    decision_id = uuid.uuid4()
    decided = DecisionRecorded(
        action="accept",
        actor="ana",
        actor_kind="human",
        rationale="r",
        evidence=(EvidenceRef(capture_id="cap", locator="$.a"),),
        prior_decision_ids=(decision_id,),
    )
    body = json.loads(json.dumps(event_json(envelope(decided), 0, 0)))["payload"]
    assert body["evidence"] == [{"capture_id": "cap", "locator": "$.a"}]
    assert body["prior_decision_ids"] == [str(decision_id)]

    versioned = ShippingPolicyVersioned(
        scope="DE", effective_from=datetime(2027, 1, 1, tzinfo=UTC), decision_id=decision_id
    )
    body = json.loads(json.dumps(event_json(envelope(versioned), 0, 0)))["payload"]
    assert body["effective_from"] == "2027-01-01T00:00:00+00:00"
    assert body["effective_to"] is None
