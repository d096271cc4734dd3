"""The exports bucket: put, get, list and delete export objects, every call bounded.

Export keys are unique per export (``schemas.exports``), so a put never races
another writer for a key; a retried put simply writes the same bytes again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from db.objects import s3_client
from producers.capture.rules import backoff_seconds
from producers.exports.exceptions import ExportStoreUnavailable
from producers.exports.settings import ExportSettings

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

T = TypeVar("T")


class ExportStore:
    def __init__(self, client: S3Client, bucket: str, max_attempts: int = 4) -> None:
        self._client = client
        self.bucket = bucket
        self._max_attempts = max_attempts

    @classmethod
    def from_settings(cls, settings: ExportSettings) -> ExportStore:
        return cls(s3_client(settings), settings.exports_bucket, settings.s3_max_attempts)

    def _retried(self, what: str, call: Callable[[], T]) -> T:
        last = ""
        for attempt in range(1, self._max_attempts + 1):
            try:
                return call()
            except ClientError as exc:
                status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
                if 400 <= status < 500 and status not in (408, 429):
                    raise
                last = str(exc.response.get("Error", {}).get("Code", status))
            except BotoCoreError as exc:
                last = type(exc).__name__
            if attempt < self._max_attempts:
                time.sleep(backoff_seconds(attempt, 0.2, 3.0))
        raise ExportStoreUnavailable(
            f"{what} in bucket {self.bucket}: no success in {self._max_attempts} attempts"
            f" (last: {last})"
        )

    def put(self, key: str, data: bytes) -> None:
        self._retried(
            f"put {key}", lambda: self._client.put_object(Bucket=self.bucket, Key=key, Body=data)
        )

    def get(self, key: str) -> bytes:
        def read() -> bytes:
            return self._client.get_object(Bucket=self.bucket, Key=key)["Body"].read()

        return self._retried(f"get {key}", read)

    def keys(self, prefix: str) -> list[str]:
        def listing() -> list[str]:
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix
            )
            return [o["Key"] for page in pages for o in page.get("Contents", [])]

        return self._retried(f"list {prefix}", listing)

    def page(
        self, prefix: str, start_after: str, limit: int = 1000
    ) -> tuple[list[tuple[str, datetime]], str | None]:
        """Up to ``limit`` objects under ``prefix`` after the key ``start_after`` ("":
        from the first), in key order, each with when it was last written; and the
        key to go on after, or None at the end."""

        def listing() -> tuple[list[tuple[str, datetime]], str | None]:
            answer = self._client.list_objects_v2(
                Bucket=self.bucket, Prefix=prefix, StartAfter=start_after, MaxKeys=limit
            )
            found = [(o["Key"], o["LastModified"]) for o in answer.get("Contents", [])]
            more = answer.get("IsTruncated", False) and found
            return found, found[-1][0] if more else None

        return self._retried(f"list {prefix} after {start_after!r}", listing)

    def delete_keys(self, keys: list[str]) -> None:
        for start in range(0, len(keys), 1000):
            batch = [{"Key": k} for k in keys[start : start + 1000]]
            self._retried(
                f"delete {len(batch)} object(s)",
                lambda b=batch: self._client.delete_objects(  # type: ignore[misc]
                    Bucket=self.bucket, Delete={"Objects": b, "Quiet": True}
                ),
            )

    def delete_prefix(self, prefix: str) -> int:
        """Delete every object under ``prefix``; returns how many there were."""
        keys = self.keys(prefix)
        self.delete_keys(keys)
        return len(keys)
