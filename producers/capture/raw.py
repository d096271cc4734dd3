"""Raw envelopes: every response a collector fetched for one capture, kept by role.

A product page can need more than one response (the page, and the offers endpoint
its script calls). Replay can only re-read what was kept, so a collector that fetches
several responses posts all of them as one envelope; a later parser version then reads
parts an earlier one ignored. A capture that is a single response (or one stored
before envelopes existed) reads as an envelope with one ``document`` part.

Wire format (version 1), encoded deterministically so equal envelopes are equal bytes:
``{"format": "gapless.raw-envelope", "version": 1, "parts": [{"role", "content_type",
"url", "body_base64"}, ...]}`` with parts ordered by role, keys sorted, no whitespace.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any

from producers.capture.exceptions import MalformedEnvelope, MissingPart

RAW_ENVELOPE_CONTENT_TYPE = "application/vnd.gapless.raw-envelope+json"
ENVELOPE_FORMAT = "gapless.raw-envelope"
ENVELOPE_VERSION = 1
DOCUMENT_ROLE = "document"

_ROLE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
_PART_KEYS = frozenset({"role", "content_type", "url", "body_base64"})
_ENVELOPE_KEYS = frozenset({"format", "version", "parts"})


@dataclass(frozen=True, slots=True)
class RawPart:
    role: str  # what the response is to the capture: "document", "offers", …
    content_type: str
    body: bytes
    url: str | None = None  # where it was fetched, when the collector said

    def __post_init__(self) -> None:
        if not _ROLE.match(self.role):
            raise MalformedEnvelope(
                f"part role {self.role!r} must be 1-64 of a-z, 0-9, '.', '_', '-'"
                " starting with a letter or digit"
            )
        if not self.content_type.strip():
            raise MalformedEnvelope(f"part {self.role!r} has an empty content type")


@dataclass(frozen=True, slots=True)
class RawEnvelope:
    """The parts of one capture, unique by role and kept in role order, so two
    envelopes with the same parts compare (and encode) equal however they were built."""

    parts: tuple[RawPart, ...]

    def __post_init__(self) -> None:
        if not self.parts:
            raise MalformedEnvelope("a raw envelope needs at least one part")
        roles = [part.role for part in self.parts]
        repeated = sorted({role for role in roles if roles.count(role) > 1})
        if repeated:
            raise MalformedEnvelope(f"part roles must be unique; repeated: {', '.join(repeated)}")
        object.__setattr__(self, "parts", tuple(sorted(self.parts, key=lambda p: p.role)))

    @property
    def roles(self) -> tuple[str, ...]:
        return tuple(part.role for part in self.parts)

    def part(self, role: str) -> RawPart:
        for candidate in self.parts:
            if candidate.role == role:
                return candidate
        raise MissingPart(role, self.roles)

    def get(self, role: str) -> RawPart | None:
        """The part with ``role``, or None for an optional part the capture lacks."""
        return next((p for p in self.parts if p.role == role), None)


def encode_raw_envelope(envelope: RawEnvelope) -> bytes:
    document = {
        "format": ENVELOPE_FORMAT,
        "version": ENVELOPE_VERSION,
        "parts": [
            {
                "role": part.role,
                "content_type": part.content_type,
                "url": part.url,
                "body_base64": base64.b64encode(part.body).decode("ascii"),
            }
            for part in envelope.parts
        ],
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def decode_raw_envelope(data: bytes | None) -> RawEnvelope | None:
    """The envelope ``data`` encodes; None for None (a row that stored no raw).
    Anything that is not a version-1 envelope raises ``MalformedEnvelope``."""
    if data is None:
        return None
    try:
        document = json.loads(data)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise MalformedEnvelope(f"a raw envelope must be JSON: {exc}") from exc
    if not isinstance(document, dict) or set(document) != _ENVELOPE_KEYS:
        raise MalformedEnvelope(f"a raw envelope is an object with keys {sorted(_ENVELOPE_KEYS)}")
    if document["format"] != ENVELOPE_FORMAT:
        raise MalformedEnvelope(f"not a raw envelope: format {document['format']!r}")
    if type(document["version"]) is not int or document["version"] != ENVELOPE_VERSION:
        raise MalformedEnvelope(
            f"raw envelope version {document['version']!r} is not supported"
            f" (supported: {ENVELOPE_VERSION})"
        )
    if not isinstance(document["parts"], list):
        raise MalformedEnvelope("a raw envelope's parts are a list")
    return RawEnvelope(tuple(_part(i, item) for i, item in enumerate(document["parts"])))


def _part(index: int, item: Any) -> RawPart:
    if not isinstance(item, dict) or set(item) != _PART_KEYS:
        raise MalformedEnvelope(f"part {index} must be an object with keys {sorted(_PART_KEYS)}")
    role, content_type, url, body = (
        item[k] for k in ("role", "content_type", "url", "body_base64")
    )
    if not isinstance(role, str) or not isinstance(content_type, str):
        raise MalformedEnvelope(f"part {index}: role and content_type are strings")
    if url is not None and not isinstance(url, str):
        raise MalformedEnvelope(f"part {index}: url is a string or null")
    if not isinstance(body, str):
        raise MalformedEnvelope(f"part {index}: body_base64 is a string")
    try:
        raw = base64.b64decode(body.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error) as exc:
        raise MalformedEnvelope(f"part {index} ({role!r}): body is not base64: {exc}") from exc
    return RawPart(role=role, content_type=content_type, body=raw, url=url)


def media_essence(content_type: str) -> str:
    """``type/subtype`` of a media type, lower case, without parameters."""
    return content_type.partition(";")[0].strip().lower()


def envelope_of_capture(content_type: str, body: bytes, source_url: str) -> RawEnvelope:
    """The raw of a stored capture as an envelope: a capture posted as an envelope
    decodes to it; any other artifact becomes its one ``document`` part."""
    if media_essence(content_type) == RAW_ENVELOPE_CONTENT_TYPE:
        envelope = decode_raw_envelope(body)
        assert envelope is not None  # body is bytes, never None
        return envelope
    return RawEnvelope((RawPart(DOCUMENT_ROLE, content_type, body, source_url),))
