"""Bounded reads from the evidence bucket.

Every read has explicit connect and read timeouts (the client's), our own retry
loop with exponential backoff and jitter (the SDK's retries are off, so the budget
is exactly ``max_attempts``), a per-process concurrency limit (a semaphore) and,
optionally, a limit across every worker (``ClusterSlots``). The caller holds no
database transaction while a read runs. The bytes are checked against the
capture's recorded SHA-256 before anyone parses them.
"""

from __future__ import annotations

import hashlib
import logging
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import psycopg
from botocore.exceptions import BotoCoreError, ClientError
from psycopg_pool import ConnectionPool

from db.objects import s3_client
from producers.capture.exceptions import EvidenceCorrupt, EvidenceMissing, EvidenceUnavailable
from producers.capture.rules import backoff_seconds
from producers.capture.worker import metrics
from schemas.settings import ObjectStoreSettings

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = logging.getLogger(__name__)

_MISSING_CODES = frozenset({"NoSuchKey", "NotFound", "404"})

# The advisory-lock namespace of read slots (the two-integer form, so it never meets
# the single-bigint locks the relay takes).
SLOT_NAMESPACE = 0x67617073  # "gaps"


class ClusterSlots:
    """At most ``limit`` object-store reads in flight across every worker process.

    Slot ``i`` is the session-level advisory lock (``SLOT_NAMESPACE``, ``i``) in the
    resolver database, held on an idle autocommit connection (never inside a
    transaction) for the length of one read. A crashed worker's connection closes and
    its slot frees itself.
    """

    def __init__(self, dsn: str, limit: int, connections: int, poll_seconds: float = 0.05) -> None:
        self.limit = limit
        self._poll = poll_seconds
        self._pool = ConnectionPool(
            dsn,
            min_size=0,
            max_size=max(1, connections),
            kwargs={"autocommit": True},
            name="worker-read-slots",
            open=True,
        )

    @contextmanager
    def slot(self, timeout_seconds: float) -> Iterator[int]:
        deadline = time.monotonic() + timeout_seconds
        with self._pool.connection(timeout=timeout_seconds) as conn:
            slots = list(range(self.limit))
            while True:
                random.shuffle(slots)  # spread the probes over the slots
                for slot in slots:
                    row = conn.execute(
                        "SELECT pg_try_advisory_lock(%s, %s)", (SLOT_NAMESPACE, slot)
                    ).fetchone()
                    if row and row[0]:
                        try:
                            yield slot
                        finally:
                            self._release(conn, slot)
                        return
                if time.monotonic() >= deadline:
                    raise EvidenceUnavailable(
                        f"all {self.limit} object-store read slots of the cluster stayed busy"
                    )
                time.sleep(self._poll * random.uniform(0.5, 1.5))

    @staticmethod
    def _release(conn: psycopg.Connection, slot: int) -> None:
        try:
            conn.execute("SELECT pg_advisory_unlock(%s, %s)", (SLOT_NAMESPACE, slot))
        except psycopg.Error:
            conn.close()  # a closed session holds no lock; the pool drops the connection

    def close(self) -> None:
        self._pool.close()


class EvidenceReader:
    def __init__(
        self,
        client: S3Client,
        bucket: str,
        max_attempts: int = 4,
        max_concurrency: int = 8,
        backoff_base: float = 0.2,
        backoff_cap: float = 3.0,
        slot_timeout: float = 30.0,
        cluster: ClusterSlots | None = None,
    ) -> None:
        self._client = client
        self.bucket = bucket
        self._max_attempts = max_attempts
        self._backoff = (backoff_base, backoff_cap)
        self._slot_timeout = slot_timeout
        self._cluster = cluster
        # Bounds this process's reads in flight, whatever the number of job threads.
        self._slots = threading.BoundedSemaphore(max_concurrency)

    @classmethod
    def from_settings(
        cls, settings: ObjectStoreSettings, cluster: ClusterSlots | None = None
    ) -> EvidenceReader:
        return cls(
            s3_client(settings),
            settings.evidence_bucket,
            settings.s3_max_attempts,
            settings.s3_max_concurrency,
            cluster=cluster,
        )

    def read(self, key: str, sha256: str) -> bytes:
        """The artifact stored under ``key``, checked against ``sha256``.

        Raises ``EvidenceUnavailable`` (retryable) when the budget runs out or no
        slot frees up in time, ``EvidenceMissing`` when the bucket has no such
        object, ``EvidenceCorrupt`` when the bytes do not match.
        """
        if not self._slots.acquire(timeout=self._slot_timeout):
            raise EvidenceUnavailable("every object-store read slot of this worker stayed busy")
        try:
            if self._cluster is None:
                body = self._read_with_retries(key)
            else:
                with self._cluster.slot(self._slot_timeout):
                    body = self._read_with_retries(key)
        finally:
            self._slots.release()
        if hashlib.sha256(body).hexdigest() != sha256:
            raise EvidenceCorrupt(f"the object {key} does not hash to the capture's sha256")
        return body

    def _read_with_retries(self, key: str) -> bytes:
        last = ""
        for attempt in range(1, self._max_attempts + 1):
            metrics.OBJECT_READS_IN_FLIGHT.inc()
            try:
                response = self._client.get_object(Bucket=self.bucket, Key=key)
                body = response["Body"].read()
                metrics.OBJECT_READS.labels("ok").inc()
                return body
            except ClientError as exc:
                error = exc.response.get("Error", {})
                code = str(error.get("Code", ""))
                status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
                if code in _MISSING_CODES or status == 404:
                    metrics.OBJECT_READS.labels("missing").inc()
                    raise EvidenceMissing(
                        f"the evidence bucket {self.bucket} has no object {key}"
                    ) from exc
                metrics.OBJECT_READS.labels("error").inc()
                last = code or str(status)
            except BotoCoreError as exc:  # connection refused, timeouts, …
                metrics.OBJECT_READS.labels("error").inc()
                last = type(exc).__name__
            finally:
                metrics.OBJECT_READS_IN_FLIGHT.dec()
            if attempt < self._max_attempts:
                time.sleep(backoff_seconds(attempt, *self._backoff))
        raise EvidenceUnavailable(
            f"the evidence bucket did not serve {key} after {self._max_attempts} attempts"
            f" (last: {last})"
        )
