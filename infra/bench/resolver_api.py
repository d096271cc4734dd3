"""Phase (h): the resolver API over HTTP as deployed, beside the in-process write path.

Reviewers' decisions and collectors' captures reach the resolver through
``gapless resolver-api``: one uvicorn process (the command runs one worker process;
more of them are replicas behind a load balancer, as the chart's ``replicas``).
This phase measures it:

1. create an evidence bucket of the sandbox's own and start two
   ``gapless resolver-api`` processes pointed at the sandbox (its databases, a jobs
   topic, that bucket);
2. seed, for each of ``CLIENTS`` client processes (``infra.bench.client_processes``),
   a tenant of its own (one stream each) holding one active item and review cases
   open on listings (through the domain: ``record_decision`` and ``open_case``);
3. **in process:** each client decides its cases with ``record_decision`` on a
   connection of its own, with a commit notifier, as the API's handler does, one
   after the other for ``seconds``: a reviewer mapping the case's listing onto the
   item (two events: the decision's and the mapping's);
4. **over HTTP:** each client posts the same decisions on its next cases to
   ``POST …/review-cases/{case}/decisions`` with an operator token, one request at a
   time on a kept-alive connection, for ``seconds``, to the first API process; the
   latency is the request's round trip as the client sees it; then again with the
   clients spread over both API processes;
5. **intake:** each client posts captures (a json-feed of ``CAPTURE_PRODUCTS``
   products each) to ``POST /v1/captures`` of the first API process with a collector
   token, for ``seconds``:
   the API puts each artifact in the bucket, records the capture, its receipt and
   its job, and enqueues the job (no worker takes them here).

Rates count requests finished between the round's start and its last reply.
``api_vs_inprocess`` is (4)'s rate through one API process over (3)'s, from the same
client processes on the same streams: what it costs is HTTP, JSON and the one
interpreter the requests share.
Each round's CPU per request is read for the clients, the API process and, on the
local services, PostgreSQL (``infra.bench.cpu``).
"""

from __future__ import annotations

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
from db.unit_of_work import UnitOfWork
from infra.bench.capture_worker import EvidenceBucket, capture_body, known_feed
from infra.bench.client_processes import ClientProcesses
from infra.bench.cpu import CpuMeter, local_service_pids
from infra.bench.latency import percentile
from infra.bench.pipeline import logs_dir
from infra.bench.sandbox import Echo, Sandbox, deployed_env
from infra.bench.writer import CATALOG, decision, process_writer, users_codec
from infra.processes import Deployed, free_port
from producers.resolver.decisions import Decision, record_decision
from producers.resolver.listing_mappings import MapListing
from producers.resolver.review_cases import CaseRevision, open_case
from schemas.events import EvidenceRef

CLIENTS = 4
"""Client processes, each one request at a time on a stream of its own."""
ROUNDS = 3
"""Measured rounds of decisions: in process, over HTTP, over HTTP to two processes."""
CASES_PER_S = 600
"""Review cases seeded per client and second of a round: more than one client can
decide (a decision takes over a millisecond of PostgreSQL's time)."""
WARM, WARM_S = 100, 60.0
"""Requests of each warm-up round (before the measured ones), at most in seconds."""
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
    in_process: Round
    http: Round
    """Through one API process."""
    http_two: Round
    """The clients spread over two API processes."""
    intake: Round
    """Through one API process."""
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


Latencies = tuple[int, float, list[float]]
"""What one client's round did: requests, seconds from the start to its last reply,
each request's milliseconds."""


def _loop(
    start: float, seconds: float, first: int, count: int, call: Callable[[int], None]
) -> Latencies:
    """``call(n)`` for n = first, first + 1 … from wall-clock ``start`` for ``seconds``
    or until ``count`` calls (the cases seeded for the round) are done."""
    pause = start - time.time()
    if pause > 0:
        time.sleep(pause)
    end, n, took = start + seconds, first, []
    while time.time() < end and n < first + count:
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
    writer = process_writer(resolver_dsn, control_dsn)

    def one(n: int) -> None:
        with writer.unit() as uow:
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


def post_captures(
    start: float, seconds: float, url: str, token: str, tenant: str, count: int
) -> Latencies:
    """In a client process: step 5; each capture's key is its own."""
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30.0) as http:

        def one(n: int) -> None:
            body = capture_body(known_feed(CAPTURE_PRODUCTS))
            key = {"Idempotency-Key": f"{tenant}-capture-{n}"}
            response = http.post("/v1/captures", json=body, headers=key)
            if response.status_code != 201:
                raise RuntimeError(f"capture answered {response.status_code}: {response.text}")

        return _loop(start, seconds, 0, count, one)


class _Rounds:
    """Runs one round on every client, from one wall-clock start, and meters it."""

    def __init__(
        self, clients: ClientProcesses, apis: list[Deployed], seconds: float, echo: Echo
    ) -> None:
        self._clients, self.seconds, self._echo = clients, seconds, echo
        named = {f"api{n + 1}" if n else "api": api.pid for n, api in enumerate(apis)}
        self._meter = CpuMeter({"clients": os.getpid(), **named, **local_service_pids()})

    def __call__(
        self,
        name: str,
        function: Callable[..., Latencies],
        args: list[tuple[Any, ...]],
        seconds: float | None = None,
    ) -> Round:
        """``function(start, seconds, *args[i])`` in client i; the last argument is the
        count of its requests at most: a measured round that reaches it fails."""
        start = time.time() + 0.2
        before = self._meter.sample()
        done: list[Latencies] = self._clients.run(
            [(function, (start, seconds or self.seconds, *a)) for a in args]
        )
        after = self._meter.sample()
        if seconds is None and any(n == a[-1] for (n, _s, _t), a in zip(done, args, strict=True)):
            raise RuntimeError(f"{name}: a client decided every case seeded for its round")
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


def _api(box: Sandbox, bucket: str, logs: Path, n: int) -> Deployed:
    port = free_port()
    env = {
        **deployed_env(box, box.relay_topic),  # it does not read the events topic
        "GAPLESS_JOBS_TOPIC": box.topic("jobs"),
        "GAPLESS_EVIDENCE_BUCKET": bucket,
        "GAPLESS_RESOLVER_API_PORT": str(port),
    }
    return Deployed(
        f"resolver-api-{n}",
        ["resolver-api"],
        env,
        logs / f"bench-{box.run_id}-api-{n}.log",
        f"http://127.0.0.1:{port}/healthz",
    )


def _seed_all(box: Sandbox, tenants: list[str], cases: int, echo: Echo) -> list[str]:
    """Step 2 for every tenant, and a collector token for each."""
    from infra.demo.captures import client_id, register_collectors
    from infra.local.collector_keys import mint
    from infra.local.layout import current_layout

    echo(f"resolver API: seeding {len(tenants)} tenants with {cases:,} review cases each")
    dbs = box.databases
    pool = ConnectionPool(dbs.resolver_dsn, min_size=1, max_size=1, open=True)
    epochs = EpochSource(dbs.control_dsn)
    try:
        for tenant in tenants:
            _seed(pool, epochs, tenant, cases)
    finally:
        pool.close()
        epochs.close()
    register_collectors(dbs, [(t, CATALOG) for t in tenants])
    return [mint(current_layout(), client_id(t)) for t in tenants]


def _measure(
    rounds: _Rounds, box: Sandbox, tenants: list[str], urls: list[str], collectors: list[str]
) -> tuple[Round, Round, Round, Round]:
    """Steps 3-5, and step 4 again with the clients spread over two API processes.
    Client i decides cases ``[r * per_round, (r + 1) * per_round)`` in round r."""
    dbs, operator = box.databases, os.environ["GAPLESS_RESOLVER_TOKEN"]
    per_round = int(CASES_PER_S * rounds.seconds) + 1
    warm = ROUNDS * per_round
    # Each client's imports, connections and first statements, unmetered.
    in_process = [(dbs.resolver_dsn, dbs.control_dsn, t) for t in tenants]
    rounds("warm-up", decide_in_process, [(*a, warm, WARM) for a in in_process], WARM_S)
    over_http = [(urls[0], operator, t) for t in tenants]
    rounds("warm-up", decide_over_http, [(*a, warm + WARM, WARM) for a in over_http], WARM_S)
    local = rounds("in process", decide_in_process, [(*a, 0, per_round) for a in in_process])
    http = rounds(
        "decisions over HTTP", decide_over_http, [(*a, per_round, per_round) for a in over_http]
    )
    spread = [(urls[i % len(urls)], operator, t) for i, t in enumerate(tenants)]
    http2 = rounds(
        f"decisions over HTTP, {len(urls)} API processes",
        decide_over_http,
        [(*a, 2 * per_round, per_round) for a in spread],
    )
    posts = [(urls[0], c, t, sys.maxsize) for t, c in zip(tenants, collectors, strict=True)]
    intake = rounds("captures posted", post_captures, posts)
    return local, http, http2, intake


def measure_resolver_api(box: Sandbox, seconds: float, echo: Echo) -> ApiFigures:
    """Steps 1-5 above."""
    tenants = [box.tenant(f"api{i}") for i in range(CLIENTS)]
    cases = ROUNDS * (int(CASES_PER_S * seconds) + 1) + 2 * WARM
    collectors = _seed_all(box, tenants, cases, echo)
    logs = logs_dir()
    with EvidenceBucket(box) as bucket, ClientProcesses(CLIENTS) as clients:
        apis = [_api(box, bucket.name, logs, n) for n in range(1, 3)]
        try:
            for api in apis:
                api.start()
            for api in apis:
                api.wait_ready(START_TIMEOUT_S)
            urls = [(api.health_url or "").removesuffix("/healthz") for api in apis]
            rounds = _Rounds(clients, apis, seconds, echo)
            local, http, http2, intake = _measure(rounds, box, tenants, urls, collectors)
        finally:
            for api in apis:
                api.stop()
    size = len(capture_body(known_feed(CAPTURE_PRODUCTS))["artifact"]) * 3 // 4
    return ApiFigures(CLIENTS, local, http, http2, intake, size)
