"""The evidence bucket: artifacts stored content-addressed and put-if-absent.

An artifact's key is ``sha256/<hex of its content>``, and the put carries
``If-None-Match: *``: a 412 answer means the same bytes are already stored, which is
success. So a retried post, a duplicate post and a post replayed after a crash all
converge on one object, and no put ever overwrites one.

Every call is bounded: explicit connect and read timeouts, our own retry loop (the
SDK's is switched off, so the budget is exactly ``max_attempts``) with exponential
backoff and jitter, and a semaphore limiting the puts in flight. The API process
builds one store, so the limit is process-wide. No database transaction is open
while a put runs.

The evidence sweep (``producers.capture.evidence_retention``) lists, checks and
deletes objects through the same store, each call under the same budget.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from db.objects import s3_client
from producers.capture.exceptions import EvidenceRejected, EvidenceUnavailable
from producers.capture.rules import backoff_seconds, evidence_key
from producers.capture.settings import IntakeSettings

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import ListObjectsV2OutputTypeDef

# Answers worth another attempt: throttling, server errors, and the 409 S3 gives a
# conditional write racing another one for the same key.
_RETRYABLE_CODES = frozenset(
    {"SlowDown", "Throttling", "RequestTimeout", "InternalError", "ConditionalRequestConflict"}
)
_MISSING_CODES = frozenset({"NoSuchKey", "NotFound", "404"})

T = TypeVar("T")


class EvidenceStore:
    def __init__(
        self,
        client: S3Client,
        bucket: str,
        max_attempts: int = 4,
        max_concurrency: int = 8,
        backoff_base: float = 0.2,
        backoff_cap: float = 3.0,
        slot_timeout: float = 30.0,
    ) -> None:
        self._client = client
        self.bucket = bucket
        self._max_attempts = max_attempts
        self._backoff = (backoff_base, backoff_cap)
        self._slot_timeout = slot_timeout
        # Bounds the puts in flight from this process, whatever the request
        # concurrency: the object store sees at most this many at once.
        self._slots = threading.BoundedSemaphore(max_concurrency)

    @classmethod
    def from_settings(cls, settings: IntakeSettings) -> EvidenceStore:
        return cls(
            s3_client(settings),
            settings.evidence_bucket,
            settings.s3_max_attempts,
            settings.s3_max_concurrency,
        )

    def put(self, content: bytes, content_type: str) -> tuple[str, bool]:
        """Store ``content`` under its SHA-256; returns the key and whether this call
        wrote it (False: it was already there). Raises ``EvidenceUnavailable`` when
        the budget runs out and ``EvidenceRejected`` for a refusal."""
        digest = hashlib.sha256(content).digest()
        key = evidence_key(digest.hex())
        if not self._slots.acquire(timeout=self._slot_timeout):
            raise EvidenceUnavailable("every evidence upload slot is busy; retry later")
        try:
            return key, self._put_with_retries(key, content, content_type, digest)
        finally:
            self._slots.release()

    def _put_with_retries(self, key: str, content: bytes, content_type: str, digest: bytes) -> bool:
        last = ""
        for attempt in range(1, self._max_attempts + 1):
            try:
                self._client.put_object(
                    Bucket=self.bucket,
                    Key=key,
                    Body=content,
                    ContentType=content_type,
                    IfNoneMatch="*",
                    ChecksumSHA256=base64.b64encode(digest).decode(),
                )
                return True
            except ClientError as exc:
                error = exc.response.get("Error", {})
                code = str(error.get("Code", ""))
                status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
                if code == "PreconditionFailed" or status == 412:
                    return False  # the same bytes are already stored
                if code not in _RETRYABLE_CODES and status < 500 and status != 409:
                    raise EvidenceRejected(f"the evidence bucket refused {key}: {code}") from exc
                last = f"{code or status}"
            except BotoCoreError as exc:  # connection refused, timeouts, …
                last = type(exc).__name__
            if attempt < self._max_attempts:
                time.sleep(backoff_seconds(attempt, *self._backoff))
        raise EvidenceUnavailable(
            f"the evidence bucket did not take the artifact after {self._max_attempts}"
            f" attempts (last: {last}); retry later"
        )

    def present(self, key: str) -> bool:
        """Whether the object is there (a 404 is False); raises ``EvidenceUnavailable``
        when the store cannot say within the budget."""

        def head() -> bool:
            try:
                self._client.head_object(Bucket=self.bucket, Key=key)
            except ClientError as exc:
                code = str(exc.response.get("Error", {}).get("Code", ""))
                if code in _MISSING_CODES:
                    return False
                raise
            return True

        return self._bounded(f"check {key}", head)

    def delete(self, key: str) -> None:
        """Delete the object; deleting one that is already gone succeeds (S3 answers
        204 either way), so a repeated deletion converges."""
        self._bounded(
            f"delete {key}", lambda: self._client.delete_object(Bucket=self.bucket, Key=key)
        )

    def listing(self, prefix: str) -> Iterator[tuple[str, datetime]]:
        """Every object under ``prefix`` with its last-modified time, page by page (each
        page one bounded call)."""
        token = ""
        while True:
            page = self._bounded(
                f"list {prefix}", functools.partial(self._list_page, prefix, token)
            )
            for obj in page.get("Contents", []):
                yield obj["Key"], obj["LastModified"]
            if not page.get("IsTruncated"):
                return
            token = page.get("NextContinuationToken", "")

    def _list_page(self, prefix: str, token: str) -> ListObjectsV2OutputTypeDef:
        if token:
            return self._client.list_objects_v2(
                Bucket=self.bucket, Prefix=prefix, ContinuationToken=token
            )
        return self._client.list_objects_v2(Bucket=self.bucket, Prefix=prefix)

    def _bounded(self, what: str, call: Callable[[], T]) -> T:
        """``call`` under the store's budget: a slot, attempts with backoff."""
        if not self._slots.acquire(timeout=self._slot_timeout):
            raise EvidenceUnavailable("every evidence call slot is busy; retry later")
        try:
            last = ""
            for attempt in range(1, self._max_attempts + 1):
                try:
                    return call()
                except ClientError as exc:
                    code = str(exc.response.get("Error", {}).get("Code", ""))
                    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
                    if code not in _RETRYABLE_CODES and status < 500:
                        raise EvidenceRejected(
                            f"the evidence bucket refused to {what}: {code}"
                        ) from exc
                    last = f"{code or status}"
                except BotoCoreError as exc:
                    last = type(exc).__name__
                if attempt < self._max_attempts:
                    time.sleep(backoff_seconds(attempt, *self._backoff))
            raise EvidenceUnavailable(
                f"the evidence bucket did not {what} after {self._max_attempts} attempts"
                f" (last: {last}); retry later"
            )
        finally:
            self._slots.release()

    def exists(self, key: str) -> bool:
        try:
            self._client.head_object(Bucket=self.bucket, Key=key)
        except ClientError:
            return False
        return True
