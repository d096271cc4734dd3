"""Phase (g): the deployed capture worker settling one large json-feed capture.

What users run is ``gapless resolver-worker`` taking the jobs the resolver API's
intake creates. This phase measures that path as deployed:

1. create an evidence bucket of the sandbox's own on the S3 server;
2. start ``gapless resolver-api`` and ``gapless resolver-worker`` as subprocesses
   pointed at the sandbox (its databases, a jobs topic of its own, that bucket), and
   ``gapless relay`` and ``gapless agents`` on an events topic of its own, the agents
   filling gaps through that API (``infra.bench.pipeline``): the capture's events
   are published and applied while it settles, as deployed;
3. bind a collector's source to a catalog with the ``json-feed`` adapter and
   approve a GTIN identity generation per class through the operator API
   (``infra.demo.captures``, as the demo does);
4. post a first feed of ``KNOWN_SHARE`` of the products through
   ``POST /v1/captures`` with a collector token and wait until its job is done, so
   the catalog already holds them; then settle the databases (``VACUUM (ANALYZE)``:
   a catalog in use has its tables' statistics; a never analyzed table, as a new
   sandbox's, can get plans that scan a catalog's every row for one item until
   autovacuum first analyzes it, about a minute in);
5. post the measured feed of ``products`` products the same way: the known ones
   again (every other one with a changed colour: a new revision; the rest as they
   were: ``unchanged``), then new ones, one in ``REVIEW_EVERY`` of them without a
   GTIN (no identity: a review case); wait until its job is done, echoing its
   checkpoint;
6. the rate is the products over the time from the first settled to the last
   (``capture_item.updated_at``, the settling statements' clock, one server), so
   the post, the job message and the parse are left out; the worker's resident
   memory is read before the feed, at a tenth and at nine tenths of it, with its
   peak (``WorkerMemory``);
7. wait until the agents' progress reaches the stream's last position:
   ``worker_settle_to_applied_s`` is the last event's applying (``inbox.decided_at``)
   minus the last product's settling (the server's clock for both);
8. stop the processes; delete the bucket's objects and the bucket.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg
from confluent_kafka.admin import AdminClient

from db.objects import s3_client
from infra.bench.cpu import process_seconds
from infra.bench.memory import peak_rss_mb, reset_peak, rss_mb
from infra.bench.pipeline import last_applied, logs_dir, relay_and_agents
from infra.bench.sandbox import Echo, Sandbox, deployed_env
from infra.bench.settle import settle_sandbox
from infra.config import load
from infra.demo.captures import (
    CATEGORIES,
    activate_identity,
    client_id,
    gtin13,
    register_collectors,
)
from infra.processes import Deployed, free_port
from schemas.settings import ObjectStoreSettings

PRODUCTS = 10_000
"""Products of the measured feed (``gapless bench --worker-products``)."""
KNOWN_SHARE = 0.1
"""Of them, already in the catalog from an earlier feed."""
REVIEW_EVERY = 100
"""One new product in this many states no GTIN: a review case."""
CATALOG = "capture1"
EVENTS = "worker-events"
"""The sandbox topic (``Sandbox.topic``) the phase's relay publishes to."""
START_TIMEOUT_S = 90.0
MIN_RATE = 20.0
"""Products/s below which the phase gives up waiting for a job (a stuck worker)."""
POLL_S = 0.5
ECHO_EVERY_S = 5.0
TERMINAL = ("done", "failed", "skipped")


@dataclass(frozen=True, slots=True)
class WorkerMemory:
    """The worker's resident MB: before the measured feed, when a tenth of it was
    settled (start-up, the parse and the first batches behind it), when nine tenths
    were, and its peak over the feed (``VmHWM``, reset before it; None when the
    reset was refused)."""

    before_mb: float
    at_10_mb: float
    at_90_mb: float
    peak_mb: float | None

    @property
    def flat(self) -> bool:
        """Nine tenths within 15 % of the tenth's mark, as ``gapless bench memory``
        judges its backlog."""
        return self.at_90_mb <= self.at_10_mb * 1.15


class _MemoryWatch:
    """Samples the worker's RSS while ``_wait_done`` polls the measured job."""

    def __init__(self, pid: int, products: int) -> None:
        self._pid, self._products = pid, products
        self._before = rss_mb(pid)
        self._reset = reset_peak(pid)
        self._marks: dict[int, float] = {}

    def __call__(self, settled: int) -> None:
        for tenths in (1, 9):
            if tenths not in self._marks and settled * 10 >= self._products * tenths:
                self._marks[tenths] = rss_mb(self._pid)

    def result(self) -> WorkerMemory:
        """After the job: a mark the polls stepped over is read now."""
        now = rss_mb(self._pid)
        peak = peak_rss_mb(self._pid) if self._reset else None
        return WorkerMemory(self._before, self._marks.get(1, now), self._marks.get(9, now), peak)


@dataclass(frozen=True, slots=True)
class WorkerFigures:
    products: int
    seconds: float
    """From the first product settled to the last (``capture_item.updated_at``)."""
    job_seconds: float
    """From the job's creation (the post's transaction) to its finish."""
    outcomes: dict[str, int]
    decisions: int
    review_cases: int
    known: int
    last_settled: datetime
    """The last product's settling (``capture_item.updated_at``)."""
    memory: WorkerMemory | None = None
    """The worker process's resident memory over the measured feed."""
    settle_to_applied_s: float | None = None
    """From the last product settled to the deployed agents' applying the last of the
    capture's events (both on the server's clock)."""
    cpu_seconds: float | None = None
    """The worker process's user and system time from the post of the measured feed
    until its job was done (None where ``/proc`` could not tell)."""

    @property
    def per_second(self) -> float:
        return self.products / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_us_per_product(self) -> float | None:
        """The worker's CPU per product of the measured feed, its parse included."""
        if self.cpu_seconds is None or not self.products:
            return None
        return self.cpu_seconds / self.products * 1e6


def _product(n: int, colour: str, with_gtin: bool = True) -> dict[str, Any]:
    category = CATEGORIES[n % len(CATEGORIES)]
    product: dict[str, Any] = {
        "id": f"p{n}",
        "sku": f"SKU-{n:06d}",
        "title": f"{category.rsplit(' > ', 1)[-1][:-1]} no. {n}",
        "category": category,
        "brand": "Gapless Goods",
        "mpn": f"GG-{n:06d}",
        "attributes": {"color": colour, "weight_grams": 100 + n % 900},
        "offer": {
            "price": {"amount": f"{10 + n % 90}.00", "currency": "EUR"},
            "availability": "in_stock",
        },
    }
    if with_gtin:
        product["gtin"] = gtin13(n)
    return product


def known_feed(known: int) -> list[dict[str, Any]]:
    """The earlier feed: products 0 … known - 1, all red."""
    return [_product(n, "red") for n in range(known)]


def measured_feed(products: int, known: int) -> list[dict[str, Any]]:
    """The known products (even ones turned blue: a new revision; odd ones as they
    were), then new ones, every ``REVIEW_EVERY``-th without a GTIN."""
    out = [_product(n, "blue" if n % 2 == 0 else "red") for n in range(min(known, products))]
    out.extend(
        _product(n, "green", with_gtin=(n - known) % REVIEW_EVERY != REVIEW_EVERY // 2)
        for n in range(known, products)
    )
    return out


def capture_body(products: list[dict[str, Any]]) -> dict[str, Any]:
    """A ``POST /v1/captures`` body holding a json-feed document of ``products``."""
    feed = {"version": 3, "currency": "EUR", "products": products}
    artifact = json.dumps(feed, separators=(",", ":")).encode()
    return {
        "schema_version": 1,
        "source_url": "https://shop.example/feed.json",
        "captured_at": datetime.now(UTC).isoformat(),
        "content_type": "application/json",
        "artifact": base64.b64encode(artifact).decode(),
    }


class EvidenceBucket:
    """The sandbox's evidence bucket: created on entry, emptied and removed on exit."""

    def __init__(self, box: Sandbox) -> None:
        self.name = f"bench-{box.run_id}-evidence"
        settings = load(ObjectStoreSettings).model_copy(update={"evidence_bucket": self.name})
        self._s3 = s3_client(settings)

    def __enter__(self) -> EvidenceBucket:
        self._s3.create_bucket(Bucket=self.name)
        return self

    def __exit__(self, *_exc: object) -> None:
        for page in self._s3.get_paginator("list_objects_v2").paginate(Bucket=self.name):
            for obj in page.get("Contents", []):
                self._s3.delete_object(Bucket=self.name, Key=obj["Key"])
        self._s3.delete_bucket(Bucket=self.name)


def worker_group(box: Sandbox) -> str:
    return f"{box.consumer_group}-worker"


def _processes(box: Sandbox, bucket: str, max_artifact: int, logs: Path) -> list[Deployed]:
    api_port, worker_port = free_port(), free_port()
    env = {
        **deployed_env(box, box.relay_topic),  # neither process reads the events topic
        "GAPLESS_JOBS_TOPIC": box.topic("jobs"),
        "GAPLESS_EVIDENCE_BUCKET": bucket,
        "GAPLESS_RESOLVER_API_PORT": str(api_port),
        "GAPLESS_RESOLVER_URL": f"http://127.0.0.1:{api_port}",
        "GAPLESS_INTAKE_MAX_ARTIFACT_BYTES": str(max(10 * 1024 * 1024, 2 * max_artifact)),
        "GAPLESS_WORKER_GROUP": worker_group(box),
        "GAPLESS_WORKER_ID": f"bench-{box.run_id}-worker",
        "GAPLESS_WORKER_HTTP_PORT": str(worker_port),
    }
    return [
        Deployed(
            "resolver-api",
            ["resolver-api"],
            env,
            logs / f"bench-{box.run_id}-resolver-api.log",
            f"http://127.0.0.1:{api_port}/healthz",
        ),
        Deployed(
            "resolver-worker",
            ["resolver-worker"],
            env,
            logs / f"bench-{box.run_id}-resolver-worker.log",
            f"http://127.0.0.1:{worker_port}/healthz",
        ),
    ]


def _post(api_url: str, token: str, body: dict[str, Any], key: str) -> uuid.UUID:
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": key}
    response = httpx.post(f"{api_url}/v1/captures", json=body, headers=headers, timeout=120.0)
    if response.status_code != 201:
        raise RuntimeError(
            f"POST /v1/captures answered {response.status_code}: {response.text[:500]}"
        )
    return uuid.UUID(response.json()["job_id"])


def _job(conn: psycopg.Connection, job_id: uuid.UUID) -> tuple[str, int, int]:
    """(status, checkpoint, products) of the job; the checkpoint is 0 before a run."""
    row = conn.execute(
        "SELECT j.status, coalesce(c.next_item, 0), coalesce(c.items, 0) FROM intake_job j"
        " LEFT JOIN capture_checkpoint c USING (job_id) WHERE j.job_id = %s",
        (job_id,),
    ).fetchone()
    if row is None:
        raise RuntimeError(f"job {job_id} is not in the resolver database")
    return str(row[0]), int(row[1]), int(row[2])


def _wait_done(
    box: Sandbox,
    job_id: uuid.UUID,
    products: int,
    processes: list[Deployed],
    echo: Echo,
    watch: Callable[[int], None] = lambda _settled: None,
) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S + products / MIN_RATE
    echoed = 0.0
    with psycopg.connect(box.databases.resolver_dsn, autocommit=True) as conn:
        while True:
            status, at, total = _job(conn, job_id)
            watch(at)
            if status in TERMINAL:
                if status != "done":
                    raise RuntimeError(f"capture job {job_id} ended {status}")
                return
            for p in processes:
                p.require_alive()
            now = time.monotonic()
            if now > deadline:
                raise RuntimeError(f"capture job {job_id} not done in time ({at} of {total})")
            if now - echoed >= ECHO_EVERY_S:
                echo(f"capture worker: job {status}, {at:,} of {total or products:,} settled")
                echoed = now
            time.sleep(POLL_S)


def _figures(box: Sandbox, job_id: uuid.UUID, products: int, known: int) -> WorkerFigures:
    with psycopg.connect(box.databases.resolver_dsn, autocommit=True) as conn:
        outcomes = {
            str(outcome): int(n)
            for outcome, n in conn.execute(
                "SELECT outcome, count(*) FROM capture_item WHERE job_id = %s GROUP BY outcome",
                (job_id,),
            ).fetchall()
        }
        row = conn.execute(
            "SELECT count(*), extract(epoch FROM max(updated_at) - min(updated_at)),"
            " count(decision_id), count(case_id), max(updated_at) FROM capture_item"
            " WHERE job_id = %s",
            (job_id,),
        ).fetchone()
        job = conn.execute(
            "SELECT extract(epoch FROM finished_at - created_at) FROM intake_job WHERE job_id = %s",
            (job_id,),
        ).fetchone()
    assert row is not None and job is not None
    settled = int(row[0])
    if settled != products:
        raise RuntimeError(f"capture job {job_id} settled {settled} of {products} products")
    return WorkerFigures(
        products=settled,
        seconds=float(row[1] or 0.0),
        job_seconds=float(job[0] or 0.0),
        outcomes=outcomes,
        decisions=int(row[2]),
        review_cases=int(row[3]),
        known=known,
        last_settled=row[4],
    )


def _delete_group(box: Sandbox) -> None:
    admin = AdminClient({"bootstrap.servers": box.bootstrap})
    for future in admin.delete_consumer_groups([worker_group(box)]).values():
        with contextlib.suppress(Exception):  # best effort, as the sandbox's own
            future.result(timeout=10)


def measure_capture_worker(box: Sandbox, products: int, echo: Echo) -> WorkerFigures:
    """Steps 1-8 above, on the sandbox's topic ``jobs``."""
    from infra.local.collector_keys import mint
    from infra.local.layout import current_layout

    tenant = box.tenant("capture")
    known = max(1, int(products * KNOWN_SHARE))
    first = capture_body(known_feed(known))
    measured = capture_body(measured_feed(products, known))
    logs = logs_dir()
    with EvidenceBucket(box) as bucket:
        size = len(measured["artifact"]) * 3 // 4
        processes = _processes(box, bucket.name, size, logs)
        api, worker = processes
        try:
            for p in processes:
                p.start()
            for p in processes:
                p.wait_ready(START_TIMEOUT_S)
            assert api.health_url is not None
            api_url = api.health_url.removesuffix("/healthz")
            pipeline = relay_and_agents(box, box.topic(EVENTS), EVENTS, api_url)
            processes.extend(pipeline)
            for p in pipeline:
                p.start()
            for p in pipeline:
                p.wait_ready(START_TIMEOUT_S)
            register_collectors(box.databases, [(tenant, CATALOG)])
            operator = {"Authorization": f"Bearer {os.environ['GAPLESS_RESOLVER_TOKEN']}"}
            with httpx.Client(base_url=api_url, headers=operator, timeout=30.0) as http:
                activate_identity(http, [(tenant, CATALOG)])
            token = mint(current_layout(), client_id(tenant))
            echo(f"capture worker: a first feed of {known:,} products (known to the catalog)")
            job = _post(api_url, token, first, f"{tenant}-known")
            _wait_done(box, job, known, processes, echo)
            settle_sandbox(box, echo)
            echo(f"capture worker: posting a feed of {products:,} products ({size:,} bytes)")
            watch = _MemoryWatch(worker.pid, products)
            cpu_before = process_seconds(worker.pid)
            job = _post(api_url, token, measured, f"{tenant}-measured")
            _wait_done(box, job, products, processes, echo, watch)
            cpu_after = process_seconds(worker.pid)
            memory = watch.result()
            applied = last_applied(box, tenant, CATALOG, processes, START_TIMEOUT_S)
        finally:
            for p in reversed(processes):
                p.stop()
            _delete_group(box)
    figures = _figures(box, job, products, known)
    figures = dataclasses.replace(
        figures,
        memory=memory,
        settle_to_applied_s=(applied - figures.last_settled).total_seconds(),
        cpu_seconds=None if cpu_before is None or cpu_after is None else cpu_after - cpu_before,
    )
    echo(
        f"capture worker: {figures.products:,} products settled in {figures.seconds:.2f} s"
        f" ({figures.per_second:,.0f}/s): {figures.outcomes}; worker RSS {memory.at_10_mb:.0f}"
        f" MB at a tenth, {memory.at_90_mb:.0f} MB at nine tenths; the agents applied its"
        f" last event {figures.settle_to_applied_s:.2f} s after the last product settled"
    )
    return figures
