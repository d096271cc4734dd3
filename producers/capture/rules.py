"""Intake rules as plain functions: identities, fingerprints, media types, backoff
(``backoff_seconds``, the shared rule of ``schemas.backoff``)."""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from schemas.backoff import backoff_seconds as backoff_seconds

SUPPORTED_SCHEMA_VERSIONS = frozenset({1})

# Fixed namespace of intake's name-based UUIDs; never change it, or retried posts
# would name new captures and jobs.
_NAMESPACE = uuid.UUID("5b7f3c1e-9a44-4d2b-8f0e-2c6a1d9e7b30")


def capture_id(tenant_id: str, source: str, instance_id: str, idempotency_key: str) -> uuid.UUID:
    """The capture a post names: one per (instance, idempotency key), whoever retries."""
    name = json.dumps(["capture", tenant_id, source, instance_id, idempotency_key])
    return uuid.uuid5(_NAMESPACE, name)


def job_id(tenant_id: str, capture: uuid.UUID, kind: str) -> uuid.UUID:
    """The job of one kind on one capture (its dedupe id on the jobs topic)."""
    return uuid.uuid5(_NAMESPACE, json.dumps(["job", tenant_id, str(capture), kind]))


def evidence_key(content_sha256: str) -> str:
    return f"sha256/{content_sha256}"


@dataclass(frozen=True, slots=True)
class MediaType:
    essence: str  # type/subtype, lower case
    value: str  # what is stored: the essence plus a charset, if one was given

    @classmethod
    def parse(cls, raw: str) -> MediaType:
        essence, _, params = raw.partition(";")
        essence = essence.strip().lower()
        charset = None
        for param in params.split(";"):
            name, _, value = param.partition("=")
            if name.strip().lower() == "charset" and value.strip():
                charset = value.strip().strip('"').lower()
        return cls(essence, f"{essence}; charset={charset}" if charset else essence)


def request_fingerprint(
    schema_version: int,
    source_url: str,
    captured_at: datetime,
    content_type: str,
    content_sha256: str,
) -> str:
    """What makes two posts under one idempotency key the same request."""
    canonical = json.dumps(
        {
            "schema_version": schema_version,
            "source_url": source_url,
            "captured_at": captured_at.astimezone(UTC).isoformat(),
            "content_type": content_type,
            "content_sha256": content_sha256,
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()
