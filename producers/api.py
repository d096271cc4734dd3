"""The resolver API process: app assembly (its composition root).

``create_app`` wires settings, the resolver connection pool, the control-database
epoch source, the watch of catalog pauses (``db.control.pauses``), bearer-token
authentication, the error format and the routers; ``gapless resolver-api`` serves it
with uvicorn.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import psycopg
from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.control.pauses import PauseWatch
from db.resolver.commit_notifier import CommitNotifier
from producers.capture.adapters import CLAIM_FIELDS
from producers.capture.evidence import EvidenceStore
from producers.capture.intake.captures import IntakeService
from producers.capture.intake.collectors import CollectorVerifier
from producers.capture.intake.enqueue import JobEnqueuer
from producers.capture.intake.limits import CaptureBodyLimit, request_limit
from producers.capture.intake.routes import CAPTURES_PATH, IntakeResources
from producers.capture.intake.routes import router as intake_router
from producers.capture.jobs_metrics import IntakeCollector
from producers.exports.routes import router as exports_router
from producers.exports.runner import ExportRunner
from producers.exports.settings import ExportSettings
from producers.http.deps import Res, Resources
from producers.resolver.attributes.routes import router as attribute_router
from producers.resolver.identity.routes import router as identity_router
from producers.resolver.routes import router as resolver_router
from producers.retention.metrics import RetentionCollector
from producers.retention.rewound_metrics import RewoundCollector
from producers.retention.routes import router as retention_router
from producers.settings import ApiSettings
from schemas.http.errors import ErrorBody, error_response, install_error_handlers
from schemas.registry_codec import codec_for
from schemas.tracing import trace_requests

DESCRIPTION = """\
The resolver's HTTP API. Every request carries `Authorization: Bearer <token>`; a
token may act on the tenants it is scoped to, with a role on each
(`GAPLESS_API_TOKENS`): `viewer` reads (and reads receipts), `operator` also
decides (review cases, splits, identity generations), `admin` also registers
consumers, reports their progress and takes rebuild leases. Collectors post
captures with a signed JWT of a registered credential instead. Every error answers
`{"code": "...", "message": "..."}` with a stable code: `UNAUTHENTICATED` (401),
`TENANT_SCOPE_DENIED`, `ROLE_DENIED` (naming the role needed),
`INSTANCE_SCOPE_DENIED` (403), `NOT_FOUND`, `*_NOT_FOUND`
(404), `IDEMPOTENCY_KEY_REUSED`, `STALE_REVISION`, `TARGET_NOT_ACTIVE`,
`OVERLAPPING_POLICY_WINDOW`, `SOURCE_NOT_ACTIVE`, `ITEM_ALREADY_EXISTS`,
`ITEM_NOT_ACTIVE`, `CLASS_ALREADY_DEFINED`, `CLASS_REPARENT_REFUSED`,
`ATTRIBUTE_VERSION_EXISTS`, `ATTRIBUTE_ALREADY_PUBLISHED`, `ATTRIBUTE_NOT_PUBLISHED`,
`ATTRIBUTE_NOT_APPLICABLE`, `HISTORY_REWOUND` (409: the catalog's history went back
without a fence; the message names the `gapless fence-epoch` that fixes it),
`PAYLOAD_TOO_LARGE` (413), `UNSUPPORTED_MEDIA_TYPE` (415), `VALIDATION_FAILED`,
`EVIDENCE_REQUIRED`, `INVALID_DECISION`, `INVALID_IDENTITY`, `UNKNOWN_IDENTITY_FIELD`,
`INVALID_SPLIT`, `INVALID_POLICY_WINDOW`,
`PRIOR_DECISION_NOT_FOUND`, `INVALID_CLASS`, `PARENT_CLASS_NOT_FOUND`,
`ATTRIBUTE_DEFINITION_INVALID`, `ATTRIBUTE_VALUE_INVALID` (422), `CURSOR_PRUNED`,
`LEASE_EXPIRED`, `LEASE_RELEASED`, `EPOCH_NOT_CURRENT` (410), `UNAVAILABLE`,
`STREAM_PAUSED` (503: the catalog is paused for a restore; retry after `Retry-After`), …
"""


def create_app(settings: ApiSettings, exports_settings: ExportSettings | None = None) -> FastAPI:
    """The resolver API; ``exports_settings`` default to the environment's."""
    backends = _Backends.build(settings, exports_settings)
    app = FastAPI(
        title="gapless resolver API",
        version="1",
        description=DESCRIPTION,
        lifespan=backends.lifespan,
    )
    app.state.grants = settings.grants()
    app.state.resources = Resources(
        backends.pool,
        backends.uow_pool,
        backends.epochs,
        settings.lease_max_ttl_seconds,
        CLAIM_FIELDS,
        backends.pauses,
        backends.notifier,
        codec_for(settings),
    )
    install_error_handlers(
        app,
        unavailable=(psycopg.OperationalError,),  # PoolTimeout is one
        bad_values=(psycopg.DataError,),
    )
    _include_domain_routers(app, backends.exports)
    _include_intake(app, settings, backends)
    _add_operations_routes(app, _metrics_registry(backends))
    trace_requests(app)  # a span per request when tracing is on
    return app


@dataclass(frozen=True)
class _Backends:
    """What the process opens at start-up and closes at shutdown (``lifespan``)."""

    pool: ConnectionPool
    uow_pool: ConnectionPool
    epochs: EpochSource
    notifier: CommitNotifier
    pauses: PauseWatch
    exports: ExportRunner
    enqueuer: JobEnqueuer

    @classmethod
    def build(cls, settings: ApiSettings, exports_settings: ExportSettings | None) -> _Backends:
        """Every backend, none opened yet."""
        pool = ConnectionPool(
            settings.resolver_dsn,
            min_size=1,
            max_size=settings.api_pool_size,
            kwargs={"autocommit": True},
            open=False,
            name="resolver-api",
        )
        uow_pool = ConnectionPool(
            settings.resolver_dsn,
            min_size=1,
            max_size=settings.api_pool_size,
            open=False,
            name="resolver-api-uow",
        )
        epochs = EpochSource(settings.control_dsn)
        notifier = CommitNotifier(settings.resolver_dsn, "resolver-api-notifier")
        pauses = settings.pause_watch("resolver-api")
        exports = ExportRunner(
            settings.resolver_dsn, settings.control_dsn, exports_settings or ExportSettings()
        )
        enqueuer = JobEnqueuer(
            settings.client_config(),
            settings.jobs_topic,
            settings.enqueue_timeout_seconds,
            open=False,
        )
        return cls(pool, uow_pool, epochs, notifier, pauses, exports, enqueuer)

    @asynccontextmanager
    async def lifespan(self, _app: FastAPI) -> AsyncIterator[None]:
        self.pool.open()
        self.uow_pool.open()
        self.enqueuer.open()
        self.notifier.start()
        self.pauses.start()
        try:
            yield
        finally:
            self.pauses.stop()
            self.notifier.close()
            self.enqueuer.close()
            self.exports.close()
            self.uow_pool.close()
            self.pool.close()
            self.epochs.close()


def _include_domain_routers(app: FastAPI, exports: ExportRunner) -> None:
    """Retention, exports, decisions and review cases, identity, attributes (in this
    order: the first match of a path wins)."""
    app.include_router(retention_router)
    app.state.exports = exports
    app.include_router(exports_router)  # after retention's /v1/exports/events
    app.include_router(resolver_router)
    app.include_router(identity_router)
    app.include_router(attribute_router)


def _include_intake(app: FastAPI, settings: ApiSettings, backends: _Backends) -> None:
    """Capture intake: collectors' signed posts, bounded in size before they are read."""
    app.state.intake = IntakeResources(
        CollectorVerifier(settings),
        IntakeService(
            backends.pool, EvidenceStore.from_settings(settings), backends.enqueuer, settings
        ),
        settings.content_types(),
        settings.intake_max_artifact_bytes,
    )
    app.add_middleware(
        CaptureBodyLimit,
        path=CAPTURES_PATH,
        max_bytes=request_limit(settings.intake_max_artifact_bytes),
    )
    app.include_router(intake_router)


def _metrics_registry(backends: _Backends) -> CollectorRegistry:
    """The app's own Prometheus registry: retention, intake, rewound streams."""
    registry = CollectorRegistry()
    registry.register(RetentionCollector(backends.pool.connection))
    registry.register(IntakeCollector(backends.pool.connection))
    registry.register(RewoundCollector(backends.epochs.rewound_now))
    return registry


def _add_operations_routes(app: FastAPI, registry: CollectorRegistry) -> None:
    """Liveness, readiness and metrics (unauthenticated, tagged ``operations``)."""

    @app.get("/healthz", tags=["operations"], response_class=Response)
    def healthz() -> Response:
        """Alive: 200 whenever the process answers (its event loop serves requests)."""
        return Response("ok\n", media_type="text/plain")

    @app.get("/readyz", tags=["operations"], responses={503: {"model": ErrorBody}})
    def readyz(res: Res) -> Response:
        """Ready: 200 when the resolver database answers."""
        try:
            with res.pool.connection(timeout=2) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error:  # PoolTimeout included
            return error_response(503, "UNAVAILABLE", "the resolver database does not answer")
        return Response("ok\n", media_type="text/plain")

    @app.get("/metrics", tags=["operations"], response_class=Response)
    def metrics() -> Response:
        """Prometheus metrics: retention positions, consumer lag, lease expiry, the
        intake job backlog, streams flagged rewound (control database)."""
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
