"""Phase (h): the resolver API over HTTP as deployed, beside the in-process write path.

Reviewers' decisions and collectors' captures reach the resolver through
``gapless resolver-api``: one uvicorn process (the command runs one worker process;
more API processes are more replicas of it). This phase measures that process:

1. create an evidence bucket of the sandbox's own and start ``gapless resolver-api``
   pointed at the sandbox (its databases, a jobs topic, that bucket);
2. seed, for each of ``CLIENTS`` client processes (``infra.bench.client_processes``),
   a tenant of its own (one stream each) holding one active item and review cases
   open on listings (through the domain: ``record_decision`` and ``open_case``);
3. **in process:** each client decides its cases with ``record_decision`` on a
   connection of its own, with a commit notifier, as the API's handler does, one
   after the other for ``seconds``: a reviewer mapping the case's listing onto the
   item (two events: the decision's and the mapping's);
4. **over HTTP:** each client posts the same decisions on its next cases to
   ``POST …/review-cases/{case}/decisions`` with an operator token, one request at a
   time on a kept-alive connection, for ``seconds``; the latency is the request's
   round trip as the client sees it;
5. **intake:** each client posts captures (a json-feed of ``CAPTURE_PRODUCTS``
   products each) to ``POST /v1/captures`` with a collector token, for ``seconds``:
   the API puts each artifact in the bucket, records the capture, its receipt and
   its job, and enqueues the job (no worker takes them here).

Rates count requests finished between the round's start and its last reply.
``api_vs_inprocess`` is (4)'s rate over (3)'s, from the same client processes on
the same streams, so what it leaves out is HTTP, JSON and the API's one process.
Each round's CPU per request is read for the clients, the API process and, on the
local services, PostgreSQL (``infra.bench.cpu``).
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.resolver.commit_notifier import CommitNotifier
from db.unit_of_work import UnitOfWork
from infra.bench.capture_worker import EvidenceBucket, capture_body, known_feed
from infra.bench.client_processes import ClientProcesses, at_exit
from infra.bench.cpu import CpuMeter, local_service_pids
from infra.bench.latency import percentile
from infra.bench.sandbox import Echo, Sandbox, deployed_env
from infra.bench.writer import CATALOG, decision, users_codec
from infra.processes import Deployed, free_port
from producers.resolver.decisions import Decision, record_decision
from producers.resolver.listing_mappings import MapListing
from producers.resolver.review_cases import CaseRevision, open_case
from schemas.events import EvidenceRef

CLIENTS = 4
"""Client processes, each one request at a time on a stream of its own."""
CASES_PER_S = 600
"""Review cases seeded per client and second of a round: more than one client can
decide (a decision takes over a millisecond of PostgreSQL's time)."""
WARM, WARM_S = 300, 0.5
"""Cases and seconds of each warm-up round (before the measured ones)."""
CAPTURE_PRODUCTS = 20
ITEM = "item-0"
START_TIMEOUT_S = 90.0
EVIDENCE = {"capture_id": "bench-capture", "locator": "$.listing"}


@dataclass(frozen=True, slots=True)
class Round:
    """One round of requests from every client."""

    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    cpu_us: dict[str, float]
    """CPU microseconds per request of each process over the round."""

    @property
    def per_second(self) -> float:
        return self.requests / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True, slots=True)
class ApiFigures:
    clients: int
    api_processes: int
    in_process: Round
    http: Round
    intake: Round
    capture_bytes: int

    @property
    def vs_in_process(self) -> float:
        base = self.in_process.per_second
        return self.http.per_second / base if base else 0.0


def case_id(n: int) -> str:
    return f"case-{n}"


def _decision(tenant: str, n: int) -> Decision:
    """A reviewer mapping case ``n``'s listing onto the tenant's item."""
    return Decision(
        tenant,
        CATALOG,
        "map",
        "reviewer:bench",
        "the listing is an offer of this item",
        (EvidenceRef(capture_id=EVIDENCE["capture_id"], locator=EVIDENCE["locator"]),),
        facts=(MapListing(f"listing-{n}", ITEM),),
        actor_kind="human",
        case=CaseRevision(case_id(n), 1),
    )


def _body(n: int) -> dict[str, Any]:
    """``_decision(n)`` as the API's request body."""
    return {
        "actor": "reviewer:bench",
        "rationale": "the listing is an offer of this item",
        "evidence": [EVIDENCE],
        "expected_revision": 1,
        "action": "map",
        "facts": [{"kind": "map_listing", "listing_id": f"listing-{n}", "item_id": ITEM}],
    }


def _seed(pool: ConnectionPool, epochs: EpochSource, tenant: str, cases: int) -> None:
    with UnitOfWork(pool, epochs, users_codec()) as uow:
        record_decision(uow, decision(tenant, [ITEM]))
    with UnitOfWork(pool, epochs, users_codec()) as uow:
        for n in range(cases):
            open_case(uow, tenant, CATALOG, case_id(n), "listing", f"listing-{n}")
        uow.commit()


@functools.cache
def _writer(resolver_dsn: str, control_dsn: str) -> UnitOfWorkSource:
    pool = ConnectionPool(resolver_dsn, min_size=1, max_size=1, open=True)
    epochs = EpochSource(control_dsn)
    notifier = CommitNotifier(resolver_dsn, "bench-api-notifier").start()
    for close in (notifier.close, epochs.close, pool.close):
        at_exit(close)
    return UnitOfWorkSource(pool, epochs, notifier)


@dataclass(frozen=True, slots=True)
class UnitOfWorkSource:
    pool: ConnectionPool
    epochs: EpochSource
    notifier: CommitNotifier

    def __call__(self) -> UnitOfWork:
        return UnitOfWork(self.pool, self.epochs, users_codec(), notifier=self.notifier)


Latencies = tuple[int, float, list[float]]
"""What one client's round did: requests, seconds from the start to its last reply,
each request's milliseconds."""


def _loop(
    start: float, seconds: float, first: int, count: int, call: Callable[[int], None]
) -> Latencies:
    """``call(n)`` for n = first, first + 1 … from wall-clock ``start`` for ``seconds``;
    at most ``count`` calls (the cases seeded for the round)."""
    pause = start - time.time()
    if pause > 0:
        time.sleep(pause)
    end, n, took = start + seconds, first, []
    while time.time() < end:
        if n >= first + count:
            raise RuntimeError(f"a client decided all {count} cases seeded for its round")
        t = time.perf_counter()
        call(n)
        took.append((time.perf_counter() - t) * 1000)
        n += 1
    return len(took), time.time() - start, took


def decide_in_process(
    start: float,
    seconds: float,
    resolver_dsn: str,
    control_dsn: str,
    tenant: str,
    first: int,
    count: int,
) -> Latencies:
    """In a client process: step 3."""
    unit = _writer(resolver_dsn, control_dsn)

    def one(n: int) -> None:
        with unit() as uow:
            record_decision(uow, _decision(tenant, n))

    return _loop(start, seconds, first, count, one)


def decide_over_http(
    start: float, seconds: float, url: str, token: str, tenant: str, first: int, count: int
) -> Latencies:
    """In a client process: step 4."""
    headers = {"Authorization": f"Bearer {token}"}
    cases = f"/v1/tenants/{tenant}/catalogs/{CATALOG}/review-cases"
    with httpx.Client(base_url=url, headers=headers, timeout=30.0) as http:

        def one(n: int) -> None:
            response = http.post(f"{cases}/{case_id(n)}/decisions", json=_body(n))
            if response.status_code != 201:
                raise RuntimeError(f"decision answered {response.status_code}: {response.text}")

        return _loop(start, seconds, first, count, one)


def post_captures(start: float, seconds: float, url: str, token: str, tenant: str) -> Latencies:
    """In a client process: step 5; each capture's key is its own."""
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30.0) as http:

        def one(n: int) -> None:
            body = capture_body(known_feed(CAPTURE_PRODUCTS))
            key = {"Idempotency-Key": f"{tenant}-capture-{n}"}
            response = http.post("/v1/captures", json=body, headers=key)
            if response.status_code != 201:
                raise RuntimeError(f"capture answered {response.status_code}: {response.text}")

        return _loop(start, seconds, 0, sys.maxsize, one)


class _Rounds:
    """Runs one round on every client, from one wall-clock start, and meters it."""

    def __init__(self, clients: ClientProcesses, api: Deployed, seconds: float, echo: Echo):
        self._clients, self._seconds, self._echo = clients, seconds, echo
        self._meter = CpuMeter({"clients": os.getpid(), "api": api.pid, **local_service_pids()})

    def __call__(
        self,
        name: str,
        function: Callable[..., Latencies],
        args: list[tuple[Any, ...]],
        seconds: float | None = None,
    ) -> Round:
        start = time.time() + 0.2
        before = self._meter.sample()
        done: list[Latencies] = self._clients.run(
            [(function, (start, seconds or self._seconds, *a)) for a in args]
        )
        after = self._meter.sample()
        took = [ms for _count, _seconds, times in done for ms in times]
        requests = sum(count for count, _s, _t in done)
        result = Round(
            requests,
            max(seconds for _c, seconds, _t in done),
            percentile(took, 50),
            percentile(took, 99),
            CpuMeter.per_event_us(before, after, requests),
        )
        self._echo(
            f"resolver API: {name}, {result.per_second:,.0f}/s from {len(args)} clients,"
            f" p50 {result.p50_ms:.1f} ms, p99 {result.p99_ms:.1f} ms; CPU per request "
            + ", ".join(f"{k} {v:,.0f} µs" for k, v in result.cpu_us.items())
        )
        return result


def _api(box: Sandbox, bucket: str, logs: Path) -> Deployed:
    port = free_port()
    env = {
        **deployed_env(box, box.relay_topic),  # it does not read the events topic
        "GAPLESS_JOBS_TOPIC": box.topic("jobs"),
        "GAPLESS_EVIDENCE_BUCKET": bucket,
        "GAPLESS_RESOLVER_API_PORT": str(port),
    }
    return Deployed(
        "resolver-api",
        ["resolver-api"],
        env,
        logs / f"bench-{box.run_id}-api.log",
        f"http://127.0.0.1:{port}/healthz",
    )


def measure_resolver_api(box: Sandbox, seconds: float, echo: Echo) -> ApiFigures:
    """Steps 1-5 above."""
    from infra.demo.captures import client_id, register_collectors
    from infra.local.collector_keys import mint
    from infra.local.layout import current_layout

    dbs = box.databases
    tenants = [box.tenant(f"api{i}") for i in range(CLIENTS)]
    per_round = int(CASES_PER_S * seconds) + 1
    logs = Path(os.environ.get("GAPLESS_LOCAL_DIR", Path.cwd() / ".local")) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    cases = 2 * per_round + 2 * WARM
    echo(f"resolver API: seeding {CLIENTS} tenants with {cases:,} review cases each")
    pool = ConnectionPool(dbs.resolver_dsn, min_size=1, max_size=1, open=True)
    epochs = EpochSource(dbs.control_dsn)
    try:
        for tenant in tenants:
            _seed(pool, epochs, tenant, cases)
    finally:
        pool.close()
        epochs.close()
    register_collectors(dbs, [(t, CATALOG) for t in tenants])
    collectors = [mint(current_layout(), client_id(t)) for t in tenants]
    operator = os.environ["GAPLESS_RESOLVER_TOKEN"]
    with EvidenceBucket(box) as bucket, ClientProcesses(CLIENTS) as clients:
        api = _api(box, bucket.name, logs)
        try:
            api.start()
            api.wait_ready(START_TIMEOUT_S)
            url = (api.health_url or "").removesuffix("/healthz")
            rounds = _Rounds(clients, api, seconds, echo)
            # Each client's imports, connections and first statements, unmetered.
            rounds(
                "warm-up",
                decide_in_process,
                [(dbs.resolver_dsn, dbs.control_dsn, t, 2 * per_round, WARM) for t in tenants],
                WARM_S,
            )
            rounds(
                "warm-up",
                decide_over_http,
                [(url, operator, t, 2 * per_round + WARM, WARM) for t in tenants],
                WARM_S,
            )
            local = rounds(
                "in process",
                decide_in_process,
                [(dbs.resolver_dsn, dbs.control_dsn, t, 0, per_round) for t in tenants],
            )
            http = rounds(
                "decisions over HTTP",
                decide_over_http,
                [(url, operator, t, per_round, per_round) for t in tenants],
            )
            intake = rounds(
                "captures posted",
                post_captures,
                [(url, token, t) for t, token in zip(tenants, collectors, strict=True)],
            )
        finally:
            api.stop()
    size = len(capture_body(known_feed(CAPTURE_PRODUCTS))["artifact"]) * 3 // 4
    return ApiFigures(CLIENTS, 1, local, http, intake, size)
