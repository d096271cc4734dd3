"""The payload records are derived from the event dataclasses: every payload type of
the envelope's union has one, named and shaped as its current ``.avsc``."""

from __future__ import annotations

import json
import typing
import uuid

from schemas import records
from schemas.codec import AVRO_DIR
from schemas.events import DecisionRecorded, EvidenceRef, Payload


def _avsc_fields(fullname: str) -> set[str]:
    schema = json.loads((AVRO_DIR / f"{fullname}.avsc").read_text())
    return {f["name"] for f in schema["fields"]}


def test_every_payload_type_has_a_record_shaped_as_its_schema() -> None:
    assert [p.cls for p in records.PAYLOADS] == list(typing.get_args(Payload))
    for payload in records.PAYLOADS:
        names = set(payload.plain) | {name for name, _, _ in payload.converted}
        assert names == _avsc_fields(payload.fullname), payload.fullname
    assert set(records.AGGREGATE.plain) == _avsc_fields(records.AGGREGATE.fullname)


def test_arrays_nested_records_and_uuids_in_arrays_cross_both_ways() -> None:
    prior = uuid.uuid4()
    decision = DecisionRecorded(
        action="accept",
        actor="a",
        actor_kind="human",
        rationale="r",
        evidence=(EvidenceRef(capture_id="c", locator="l"),),
        prior_decision_ids=(prior,),
    )
    record = records.BY_TYPE[DecisionRecorded].to_record(decision)
    assert record["evidence"] == [{"capture_id": "c", "locator": "l"}]
    assert record["prior_decision_ids"] == [str(prior)]
    assert (
        records.BY_NAME[records.BY_TYPE[DecisionRecorded].fullname].from_record(record) == decision
    )
