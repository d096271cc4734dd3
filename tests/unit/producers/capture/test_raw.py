"""Raw envelopes: deterministic bytes, exact round trips, typed errors for anything
that is not an envelope, and plain artifacts read as one ``document`` part."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from producers.capture.exceptions import (
    MALFORMED_ENVELOPE,
    MISSING_PART,
    MalformedEnvelope,
    MissingPart,
)
from producers.capture.raw import (
    RAW_ENVELOPE_CONTENT_TYPE,
    RawEnvelope,
    RawPart,
    decode_raw_envelope,
    encode_raw_envelope,
    envelope_of_capture,
)

roles = st.from_regex(r"[a-z0-9][a-z0-9._-]{0,20}", fullmatch=True)
parts = st.builds(
    RawPart,
    role=roles,
    content_type=st.sampled_from(["text/html; charset=utf-8", "application/json", "image/png"]),
    body=st.binary(max_size=300),
    url=st.none() | st.text(max_size=40),
)
envelopes = st.lists(parts, min_size=1, max_size=5, unique_by=lambda p: p.role).map(
    lambda found: RawEnvelope(tuple(found))
)


@given(envelopes)
def test_an_envelope_round_trips_exactly(envelope: RawEnvelope) -> None:
    assert decode_raw_envelope(encode_raw_envelope(envelope)) == envelope


@given(
    st.lists(parts, min_size=1, max_size=5, unique_by=lambda p: p.role).flatmap(
        lambda found: st.tuples(st.just(found), st.permutations(found))
    )
)
def test_the_same_parts_encode_to_the_same_bytes_in_any_order(
    orders: tuple[list[RawPart], list[RawPart]],
) -> None:
    found, shuffled = orders
    assert encode_raw_envelope(RawEnvelope(tuple(found))) == encode_raw_envelope(
        RawEnvelope(tuple(shuffled))
    )


@given(st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_raise_malformed_envelope(data: bytes) -> None:
    try:
        decode_raw_envelope(data)
    except MalformedEnvelope as exc:
        assert exc.code == MALFORMED_ENVELOPE


def _envelope_json(**changes: object) -> bytes:
    document: dict[str, object] = {
        "format": "gapless.raw-envelope",
        "version": 1,
        "parts": [
            {
                "role": "document",
                "content_type": "text/html",
                "url": None,
                "body_base64": base64.b64encode(b"<html></html>").decode(),
            }
        ],
    }
    document.update(changes)
    return json.dumps(document).encode()


def test_a_valid_envelope_decodes_and_none_is_none() -> None:
    envelope = decode_raw_envelope(_envelope_json())
    assert envelope is not None
    assert envelope.part("document").body == b"<html></html>"
    assert decode_raw_envelope(None) is None


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"\xff\xfe not json", "must be JSON"),
        (b"[]", "an object with keys"),
        (_envelope_json(format="something-else"), "not a raw envelope"),
        (_envelope_json(version=2), "version 2 is not supported"),
        (_envelope_json(version=True), "version True is not supported"),
        (_envelope_json(parts={}), "parts are a list"),
        (_envelope_json(parts=[]), "at least one part"),
        (_envelope_json(parts=["x"]), "part 0 must be an object"),
        (
            _envelope_json(
                parts=[
                    {
                        "role": "document",
                        "content_type": "text/html",
                        "url": None,
                        "body_base64": "@@",
                    }
                ]
            ),
            "not base64",
        ),
        (
            _envelope_json(
                parts=[
                    {
                        "role": "Doc ument",
                        "content_type": "text/html",
                        "url": None,
                        "body_base64": "",
                    }
                ]
            ),
            "part role",
        ),
        (
            _envelope_json(
                parts=[
                    {"role": "a", "content_type": "text/html", "url": None, "body_base64": ""},
                    {"role": "a", "content_type": "text/html", "url": None, "body_base64": ""},
                ]
            ),
            "repeated: a",
        ),
        (_envelope_json(extra=1), "an object with keys"),
    ],
)
def test_malformed_envelopes_are_typed_errors(data: bytes, says: str) -> None:
    with pytest.raises(MalformedEnvelope, match=says) as caught:
        decode_raw_envelope(data)
    assert caught.value.code == MALFORMED_ENVELOPE


def test_a_missing_part_is_named() -> None:
    envelope = RawEnvelope((RawPart("document", "text/html", b""),))
    with pytest.raises(MissingPart, match="no 'offers' part \\(parts: document\\)") as caught:
        envelope.part("offers")
    assert (caught.value.code, caught.value.role) == (MISSING_PART, "offers")
    assert envelope.get("offers") is None


def test_a_plain_artifact_is_one_document_part() -> None:
    envelope = envelope_of_capture("text/html; charset=utf-8", b"<p>hi</p>", "https://x.example/p")
    assert envelope.parts == (
        RawPart("document", "text/html; charset=utf-8", b"<p>hi</p>", "https://x.example/p"),
    )


def test_an_envelope_capture_decodes_to_its_parts() -> None:
    envelope = RawEnvelope(
        (RawPart("offers", "application/json", b"{}"), RawPart("document", "text/html", b"<p/>"))
    )
    stored = encode_raw_envelope(envelope)
    for content_type in (RAW_ENVELOPE_CONTENT_TYPE, f"{RAW_ENVELOPE_CONTENT_TYPE}; charset=utf-8"):
        assert envelope_of_capture(content_type, stored, "https://x.example") == envelope
    assert envelope.roles == ("document", "offers")
    with pytest.raises(MalformedEnvelope):
        envelope_of_capture(RAW_ENVELOPE_CONTENT_TYPE, b"<p>not an envelope</p>", "https://x")
