"""Fixtures of the evidence sweep tests: a bucket of their own on the real S3 server,
the store and settings that use it, and builders of captures in every state that
keeps (or does not keep) one."""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import psycopg
import pytest

from db.repositories import capture_jobs
from db.resolver import intake as intake_sql
from db.settings import DatabaseSettings
from db.unit_of_work import Transaction
from producers.capture import rules
from producers.capture.evidence import EvidenceStore, s3_client
from producers.capture.evidence_retention.settings import EvidenceSweepSettings
from producers.capture.evidence_retention.sweep import SweepPolicy
from schemas.jobs import CAPTURE_JOB

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

WINDOW = 3600.0
"""The tests' retention window; an expired capture is backdated past it."""


@pytest.fixture()
def sweep_settings(clean_db: DatabaseSettings, services: dict[str, str]) -> EvidenceSweepSettings:
    assert os.environ.get("GAPLESS_S3_ENDPOINT"), "use_local_services sets the S3 variables"
    return EvidenceSweepSettings(
        resolver_dsn=clean_db.resolver_dsn,
        evidence_bucket=f"evidence-test-{uuid.uuid4().hex[:12]}",
        evidence_retention_seconds=WINDOW,
        evidence_sweeper_id="test-sweeper",
    )


@pytest.fixture()
def s3(sweep_settings: EvidenceSweepSettings) -> Iterator[S3Client]:
    """The real S3 client, with the test's own bucket (emptied and removed after)."""
    client = s3_client(sweep_settings)
    bucket = sweep_settings.evidence_bucket
    client.create_bucket(Bucket=bucket)
    yield client
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents", []):
            client.delete_object(Bucket=bucket, Key=obj["Key"])
    client.delete_bucket(Bucket=bucket)


@pytest.fixture()
def store(s3: S3Client, sweep_settings: EvidenceSweepSettings) -> EvidenceStore:
    return EvidenceStore(s3, sweep_settings.evidence_bucket, max_attempts=2)


@pytest.fixture()
def policy() -> SweepPolicy:
    return SweepPolicy(WINDOW, page_size=2, swept_by="test-sweeper")


def owner(settings: DatabaseSettings) -> psycopg.Connection:
    return psycopg.connect(settings.resolver_owner_dsn, autocommit=True)


def app(settings: DatabaseSettings) -> psycopg.Connection:
    """The services' login, as the sweep runs: its grants are part of what is tested."""
    return psycopg.connect(settings.resolver_dsn, autocommit=True)


@dataclass(frozen=True)
class Built:
    tenant_id: str
    capture_id: uuid.UUID
    job_id: uuid.UUID
    evidence_key: str


@dataclass
class Captures:
    """Builds captures as intake and the worker leave them, then ages them (as the
    tables' owner) so a test need not wait out a window."""

    settings: DatabaseSettings
    store: EvidenceStore

    def make(
        self,
        content: bytes,
        tenant: str = "t1",
        key: str | None = None,
        age_seconds: float = 2 * WINDOW,
        job_status: str = "done",
        outcome: str | None = "unchanged",
    ) -> Built:
        evidence_key, _ = self.store.put(content, "application/json")
        sha = hashlib.sha256(content).hexdigest()
        idem = key or uuid.uuid4().hex
        capture = intake_sql.NewCapture(
            tenant_id=tenant,
            capture_id=rules.capture_id(tenant, "shop", "inst-a", idem),
            source="shop",
            instance_id="inst-a",
            schema_version=1,
            source_url="https://shop.example/p/1",
            captured_at=datetime.now(UTC),
            content_type="application/json",
            content_sha256=sha,
            size_bytes=len(content),
            evidence_key=evidence_key,
        )
        job = rules.job_id(tenant, capture.capture_id, CAPTURE_JOB)
        with owner(self.settings) as conn:
            conn.execute(
                "INSERT INTO collector_instance (tenant_id, source, instance_id)"
                " VALUES (%s, 'shop', 'inst-a') ON CONFLICT DO NOTHING",
                (tenant,),
            )
            assert intake_sql.insert_capture(conn, capture)
            intake_sql.insert_receipt(conn, uuid.uuid4(), capture, idem, "fp")
            capture_jobs.insert_pending(
                Transaction(conn), job, tenant, capture.capture_id, CAPTURE_JOB
            )
            conn.execute(
                "UPDATE intake_job SET status = %s, finished_at = CASE WHEN %s IN"
                " ('done', 'failed', 'skipped') THEN now() - make_interval(secs => %s) END,"
                " error_code = CASE WHEN %s = 'failed' THEN 'X' END WHERE job_id = %s",
                (job_status, job_status, age_seconds, job_status, job),
            )
            if outcome is not None:
                conn.execute(
                    "INSERT INTO capture_item (tenant_id, capture_id, source_item_id,"
                    " parser_version, job_id, source, catalog_id, adapter, item_index,"
                    " schema_version, fingerprint, locator, outcome, error_code, next_attempt_at,"
                    " claims) VALUES (%s, %s, 'sku-1', 1, %s, 'shop', 'c1', 'json-feed', 0, 1,"
                    " 'f', '$.items[0]', %s, %s, %s, %s::jsonb)",
                    (
                        tenant,
                        capture.capture_id,
                        job,
                        outcome,
                        "X" if outcome in ("retryable", "failed", "rejected") else None,
                        datetime.now(UTC) if outcome == "retryable" else None,
                        json.dumps({"title": ["A lamp", "$.items[0].title"]}),
                    ),
                )
                conn.execute(
                    "INSERT INTO capture_checkpoint (tenant_id, job_id, parser_version,"
                    " next_item, items) VALUES (%s, %s, 1, 1, 1)",
                    (tenant, job),
                )
            conn.execute(
                "UPDATE capture SET created_at = now() - make_interval(secs => %s)"
                " WHERE tenant_id = %s AND capture_id = %s",
                (age_seconds, tenant, capture.capture_id),
            )
        return Built(tenant, capture.capture_id, job, evidence_key)

    def cite(self, built: Built) -> None:
        """An accepted decision citing the capture as its evidence."""
        evidence = json.dumps([{"capture_id": str(built.capture_id), "locator": "$.items[0]"}])
        with owner(self.settings) as conn:
            conn.execute(
                "INSERT INTO decision (tenant_id, catalog_id, decision_id, action, actor,"
                " actor_kind, rationale, evidence) VALUES (%s, 'c1', %s, 'accept', 'rev',"
                " 'human', 'checked', %s::jsonb)",
                (built.tenant_id, uuid.uuid4(), evidence),
            )

    def open_case(self, built: Built, status: str = "open") -> None:
        """A review case one of the capture's products opened."""
        with owner(self.settings) as conn:
            conn.execute(
                "INSERT INTO review_case (tenant_id, catalog_id, case_id, subject_type,"
                " subject_id, status, revision) VALUES (%s, 'c1', 'case-1', 'listing', 'l1',"
                " %s, 1)",
                (built.tenant_id, status),
            )
            conn.execute(
                "UPDATE capture_item SET outcome = 'review', case_id = 'case-1'"
                " WHERE tenant_id = %s AND capture_id = %s",
                (built.tenant_id, built.capture_id),
            )

    def rows(self, built: Built) -> dict[str, int]:
        """How many rows of each table the capture still has."""
        key = (built.tenant_id, built.capture_id)
        out: dict[str, int] = {}
        with owner(self.settings) as conn:
            for table in (
                "capture",
                "receipt",
                "intake_job",
                "capture_item",
            ):
                row = conn.execute(
                    f"SELECT count(*) FROM {table} WHERE tenant_id = %s AND capture_id = %s", key
                ).fetchone()
                out[table] = int(row[0]) if row else 0
            row = conn.execute(
                "SELECT count(*) FROM capture_checkpoint WHERE job_id = %s", (built.job_id,)
            ).fetchone()
            out["capture_checkpoint"] = int(row[0]) if row else 0
        return out

    def deletions(self) -> list[dict[str, Any]]:
        with owner(self.settings) as conn:
            rows = conn.execute(
                "SELECT kind, reason, evidence_key, capture_id, derived, status"
                " FROM evidence_deletion ORDER BY id"
            ).fetchall()
        return [
            {"kind": k, "reason": r, "key": e, "capture_id": c, "derived": d, "status": s}
            for k, r, e, c, d, s in rows
        ]


@pytest.fixture()
def captures(clean_db: DatabaseSettings, store: EvidenceStore) -> Captures:
    return Captures(clean_db, store)
