"""Messages of the jobs topic (``intake.jobs.v1``): a small JSON reference to a job row.

The message carries only identities; the worker loads the job and its capture from
the resolver database, so a duplicate or late message is harmless (the job id is the
dedupe id). The Kafka key is the job id, so every message of one job lands on one
partition.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from schemas.exceptions import MalformedBody, UnknownSchema

JOB_MESSAGE_VERSION = 1
CAPTURE_JOB = "capture.process"


@dataclass(frozen=True, slots=True)
class JobMessage:
    job_id: uuid.UUID
    kind: str
    tenant_id: str
    capture_id: uuid.UUID

    def key(self) -> bytes:
        return str(self.job_id).encode()

    def encode(self) -> bytes:
        return json.dumps(
            {
                "version": JOB_MESSAGE_VERSION,
                "job_id": str(self.job_id),
                "kind": self.kind,
                "tenant_id": self.tenant_id,
                "capture_id": str(self.capture_id),
            },
            separators=(",", ":"),
            sort_keys=True,
        ).encode()

    @classmethod
    def decode(cls, value: bytes) -> JobMessage:
        try:
            body = json.loads(value)
            if body["version"] != JOB_MESSAGE_VERSION:
                raise UnknownSchema(
                    f"unknown job message version {body['version']!r}",
                )
            return cls(
                uuid.UUID(body["job_id"]),
                str(body["kind"]),
                str(body["tenant_id"]),
                uuid.UUID(body["capture_id"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise MalformedBody(f"not a job message: {exc}") from exc
