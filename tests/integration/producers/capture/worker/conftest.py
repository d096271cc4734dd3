"""Fixtures of the capture-worker tests: real PostgreSQL, Kafka and S3, captures
accepted through the real intake service as ``json-feed`` documents, identity
generations activated through the real decision path (class ``shoe`` is identified
by ``sku``), and a worker wired as in production."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.repositories import identity as identity_rows
from db.repositories.identity import GenerationKey
from db.settings import DatabaseSettings
from db.tables.domain import APP_ROLE
from db.unit_of_work import Transaction, UnitOfWork
from producers.capture.adapters import ADAPTERS, CLAIM_FIELDS, Extraction
from producers.capture.evidence import EvidenceStore
from producers.capture.intake.captures import CaptureSubmission, IntakeService
from producers.capture.intake.collectors import Collector, register
from producers.capture.intake.enqueue import JobEnqueuer
from producers.capture.settings import IntakeSettings
from producers.capture.worker.objects import EvidenceReader
from producers.capture.worker.pipeline import CaptureWorker, parse_capture
from producers.capture.worker.resolution import RESOLVE, new_item_id
from producers.capture.worker.retries import RetryPolicy
from producers.capture.worker.settings import WorkerSettings
from producers.resolver.decisions import Decision, record_decision
from producers.resolver.identity import (
    ActivateGeneration,
    IdentityRule,
    create_and_backfill,
    identity_hash,
)
from schemas.codec import CODEC
from schemas.events import EvidenceRef

T0 = datetime(2026, 11, 30, 12, tzinfo=UTC)
ADAPTER = "json-feed"
SKU = IdentityRule(("sku",))


@dataclass
class Parser:
    """The production parse (``parse_capture``), counting its calls, optionally
    claiming another parser version (to play an older or newer worker)."""

    parser_version: int | None = None
    calls: int = 0

    def __call__(
        self, adapter: str, artifact: bytes, content_type: str, source_url: str
    ) -> Extraction:
        self.calls += 1
        extraction = parse_capture(adapter, artifact, content_type, source_url)
        if self.parser_version is None:
            return extraction
        return replace(extraction, parser_version=self.parser_version)


def as_app_role(conn: psycopg.Connection) -> None:
    conn.execute(f"SET ROLE {APP_ROLE}")
    conn.commit()


@dataclass(frozen=True)
class Job:
    job_id: uuid.UUID
    capture_id: uuid.UUID
    tenant_id: str


def product(item: str, title: str | None = None, **attributes: str) -> dict[str, Any]:
    """A json-feed product of class ``shoe`` whose sku is its id."""
    return {
        "id": item,
        "sku": item,
        "title": title or f"title of {item}",
        "category": "shoe",
        "attributes": attributes,
    }


@dataclass
class Harness:
    db: DatabaseSettings
    settings: WorkerSettings
    intake: IntakeService
    intake_pool: ConnectionPool
    evidence: EvidenceStore
    pool: ConnectionPool
    uow_pool: ConnectionPool
    epochs: EpochSource
    reader: EvidenceReader
    parser: Parser = field(default_factory=Parser)
    workers: int = 0
    settle_batch: int | None = None  # None: the worker's default

    def conn(self) -> psycopg.Connection:
        """A connection as the tables' owner: tests use it to inspect state and to
        break things (a lost artifact, a due retry) the application role cannot."""
        return psycopg.connect(self.db.resolver_owner_dsn, autocommit=True)

    def bind(
        self, tenant: str = "t1", source: str = "shop", catalog: str = "c1", adapter: str = ADAPTER
    ) -> None:
        from producers.capture.worker import sources

        with self.conn() as conn, conn.transaction():
            sources.register(Transaction(conn), tenant, source, catalog, adapter, "test", ADAPTERS)

    def capture(
        self,
        products: list[dict[str, Any]],
        *,
        tenant: str = "t1",
        captured_at: datetime = T0,
        key: str | None = None,
        raw: bytes | None = None,
    ) -> Job:
        body = raw if raw is not None else json.dumps({"products": products}).encode()
        accepted = self.intake.accept(
            Collector(f"client-{tenant}", tenant, "shop", "inst-a"),
            CaptureSubmission(
                idempotency_key=key or uuid.uuid4().hex,
                schema_version=1,
                source_url="https://shop.example/feed",
                captured_at=captured_at,
                content_type="application/json",
                artifact=body,
            ),
        )
        r = accepted.receipt
        assert r.job_id is not None
        return Job(r.job_id, r.capture_id, tenant)

    def worker(self, owner: str | None = None, **overrides: Any) -> CaptureWorker:
        self.workers += 1
        options: dict[str, Any] = {
            "owner": owner or f"worker-{self.workers}",
            "claim_seconds": 60.0,
            "item_retries": RetryPolicy(3, 0.01, 0.05),
            "job_retries": RetryPolicy(3, 0.01, 0.05),
        }
        if self.settle_batch is not None:
            options["settle_batch"] = self.settle_batch
        options.update(overrides)
        return CaptureWorker(
            self.pool,
            self.uow_pool,
            self.epochs,
            options.pop("codec", CODEC),
            options.pop("reader", self.reader),
            options.pop("parse", self.parser),
            options.pop("resolve", RESOLVE),
            **options,
        )

    def tenant(self, tenant: str) -> None:
        """A tenant ready to capture: its collector registered, its source bound, an
        identity generation active."""
        with self.conn() as conn:
            register(conn, f"client-{tenant}", tenant, "shop", "inst-a")
        self.bind(tenant)
        self.activate(tenant)

    def comparable(self, tenant: str) -> dict[str, Any]:
        """``snapshot`` without the ids that name the tenant's own captures and
        decisions: two tenants fed the same captures compare equal when their items,
        revisions, mappings, outcomes, claims and checkpoints are the same."""
        s = self.snapshot(tenant)
        return {
            "items": s["items"],
            "mappings": [m[:3] + m[4:] for m in s["mappings"]],
            "results": sorted(r[1:7] for r in s["results"]),
            "claims": sorted(c[1:] for c in s["claims"]),
            "decisions": len(s["decisions"]),
            "cases": len(s["cases"]),
            "checkpoints": sorted(c[1:] for c in s["checkpoints"]),
            "jobs": sorted(j[1] for j in s["jobs"]),
            "positions": [p for _, p, _ in s["outbox"]],
        }

    def uow(self) -> UnitOfWork:
        return UnitOfWork(self.uow_pool, self.epochs, CODEC)

    def activate(
        self,
        tenant: str = "t1",
        catalog: str = "c1",
        class_id: str = "shoe",
        rule: IdentityRule = SKU,
    ) -> int:
        """Create, backfill and (by a human decision) activate an identity generation."""
        report = create_and_backfill(self.uow, tenant, catalog, class_id, rule, CLAIM_FIELDS)
        key = report.generation.key
        with self.uow() as u:
            row = identity_rows.get_generation(
                u.tx, GenerationKey(tenant, catalog, class_id, key.generation)
            )
        assert row is not None
        decision = Decision(
            tenant_id=tenant,
            catalog_id=catalog,
            action="identity",
            actor="reviewer:test",
            rationale="approve the rule",
            evidence=(EvidenceRef(capture_id="setup", locator="-"),),
            facts=(ActivateGeneration(class_id, key.generation, row.revision),),
        )
        with self.uow() as u:
            record_decision(u, decision)
        return key.generation

    def item(
        self, sku: str, generation: int = 1, catalog: str = "c1", class_id: str = "shoe"
    ) -> str:
        """The id of the item the product with this sku creates."""
        digest = identity_hash(SKU, {"sku": sku})
        assert digest is not None
        return new_item_id(catalog, class_id, generation, digest)

    def make_due(self) -> None:
        """Every retry, product or job, is due now."""
        with self.conn() as conn:
            conn.execute(
                "UPDATE capture_item SET next_attempt_at = clock_timestamp() - interval '1s'"
                " WHERE outcome = 'retryable'"
            )
            conn.execute(
                "UPDATE intake_job SET next_attempt_at = clock_timestamp() - interval '1s'"
                " WHERE status = 'retrying'"
            )

    def expire_claims(self) -> None:
        with self.conn() as conn:
            conn.execute(
                "UPDATE intake_job SET claim_expires_at = clock_timestamp() - interval '1s'"
                " WHERE status = 'running'"
            )

    def job(self, job: Job) -> dict[str, Any]:
        with self.conn() as conn:
            row = conn.execute(
                "SELECT status, runs, run_failures, error_code, last_error, claim_owner"
                " FROM intake_job WHERE job_id = %s",
                (job.job_id,),
            ).fetchone()
        assert row is not None
        keys = ("status", "runs", "run_failures", "error_code", "last_error", "claim_owner")
        return dict(zip(keys, row, strict=True))

    def results(self, job: Job) -> dict[str, tuple[Any, ...]]:
        """source item id → (outcome, attempts, error code, item id)."""
        with self.conn() as conn:
            rows = conn.execute(
                "SELECT source_item_id, outcome, attempts, error_code, item_id FROM capture_item"
                " WHERE job_id = %s",
                (job.job_id,),
            ).fetchall()
        return {r[0]: tuple(r[1:]) for r in rows}

    def checkpoint(self, job: Job) -> int | None:
        with self.conn() as conn:
            row = conn.execute(
                "SELECT next_item FROM capture_checkpoint WHERE job_id = %s"
                " ORDER BY parser_version DESC LIMIT 1",
                (job.job_id,),
            ).fetchone()
        return row[0] if row else None

    def snapshot(self, tenant: str = "t1") -> dict[str, Any]:
        """Everything the worker's work shows in the resolver database for a tenant,
        without times and the operators' handles: equal snapshots, equal state."""
        queries = {
            "items": "SELECT item_id, class_id, status, title, attributes, revision"
            " FROM catalog_item WHERE tenant_id = %s ORDER BY item_id",
            "mappings": "SELECT listing_id, item_id, item_revision, decision_id, revision"
            " FROM listing_mapping WHERE tenant_id = %s ORDER BY listing_id",
            "decisions": "SELECT decision_id, action, actor_kind, evidence FROM decision"
            " WHERE tenant_id = %s ORDER BY decision_id",
            "cases": "SELECT case_id, subject_type, subject_id, status, revision"
            " FROM review_case WHERE tenant_id = %s ORDER BY case_id",
            "results": "SELECT capture_id, source_item_id, parser_version, item_index, outcome,"
            " error_code, item_id, decision_id, case_id FROM capture_item WHERE tenant_id = %s"
            " ORDER BY capture_id, source_item_id, parser_version",
            "claims": "SELECT capture_id, source_item_id, parser_version, c.key,"
            " c.value ->> 0, c.value ->> 1"
            " FROM capture_item CROSS JOIN LATERAL jsonb_each(claims) AS c"
            " WHERE tenant_id = %s ORDER BY 1, 2, 3, 4",
            "source_items": "SELECT source, source_item_id, capture_id, parser_version, item_id"
            " FROM source_item_state WHERE tenant_id = %s ORDER BY source, source_item_id",
            "checkpoints": "SELECT job_id, parser_version, next_item, items"
            " FROM capture_checkpoint WHERE tenant_id = %s ORDER BY job_id, parser_version",
            "jobs": "SELECT job_id, status FROM intake_job WHERE tenant_id = %s ORDER BY job_id",
            "outbox": "SELECT catalog_id, position, event_id FROM outbox WHERE tenant_id = %s"
            " ORDER BY catalog_id, position",
        }
        with self.conn() as conn:
            return {
                name: [tuple(r) for r in conn.execute(sql, (tenant,)).fetchall()]
                for name, sql in queries.items()
            }


@pytest.fixture()
def harness(clean_db: DatabaseSettings, topic: str) -> Iterator[Harness]:
    settings = WorkerSettings(jobs_topic=topic)
    intake_settings = IntakeSettings(jobs_topic=topic)
    with psycopg.connect(clean_db.resolver_dsn, autocommit=True) as conn:
        for tenant in ("t1", "t2"):
            register(conn, f"client-{tenant}", tenant, "shop", "inst-a")
    intake_pool = ConnectionPool(
        clean_db.resolver_dsn, min_size=1, max_size=4, kwargs={"autocommit": True}, open=True
    )
    # The worker's own connections run as the application role: its grants suffice.
    pool = ConnectionPool(
        clean_db.resolver_dsn,
        min_size=1,
        max_size=8,
        kwargs={"autocommit": True},
        configure=as_app_role,
        open=True,
    )
    uow_pool = ConnectionPool(
        clean_db.resolver_dsn, min_size=1, max_size=8, configure=as_app_role, open=True
    )
    enqueuer = JobEnqueuer(settings.kafka_bootstrap, topic, 10)
    epochs = EpochSource(clean_db.control_dsn)
    evidence = EvidenceStore.from_settings(intake_settings)
    harness = Harness(
        clean_db,
        settings,
        IntakeService(intake_pool, evidence, enqueuer, intake_settings),
        intake_pool,
        evidence,
        pool,
        uow_pool,
        epochs,
        EvidenceReader.from_settings(settings),
    )
    yield harness
    enqueuer.close()
    epochs.close()
    for p in (pool, uow_pool, intake_pool):
        p.close()
