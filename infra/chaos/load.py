"""The campaign's workload, kept going through every fault.

- domain writers: the demo's workload (``infra.demo.workload``) on several streams,
  paced, until the faults stop, outliving database restarts (``transient``);
- API deciders: review decisions through ``POST …/review-cases/{id}/decisions`` of
  the deployed resolver API, one-item (one listing mapped) and multi-item (three
  listings and a shipping-policy version), on streams of their own whose items a
  rule creates in this process; a request is retried through API kills and outages
  (a retried decision whose first answer was lost is refused ``STALE_REVISION``:
  the case was decided, which is how a client knows);
- collectors: the demo's feeds (``infra.demo.captures``) posted to the deployed
  ``POST /v1/captures``, each post retried through faults under its idempotency key;
- poison: undecodable messages on the events topic, the only thing the applier may
  quarantine.

The rebuild and the fence are asked for by the campaign at their instants.
"""

from __future__ import annotations

import functools
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
from confluent_kafka import Producer
from psycopg_pool import ConnectionPool

from db.control.epochs import EpochSource
from db.exceptions import StreamFenced, StreamPaused
from db.settings import DatabaseSettings
from db.unit_of_work import UnitOfWork
from infra.demo import captures as demo_captures
from infra.demo.workload import WorkloadStats, run_workload
from producers.resolver.catalog_items import ItemChange
from producers.resolver.decisions import Decision, record_decision
from producers.resolver.review_cases import open_case
from schemas.events import EvidenceRef
from schemas.registry_codec import codec_for
from schemas.settings import KafkaSettings, SchemaRegistrySettings

Echo = Callable[[str], None]

TRANSIENT: tuple[type[BaseException], ...] = (
    psycopg.OperationalError,
    psycopg.InterfaceError,
    StreamPaused,
    StreamFenced,
)
"""What a writer in this process outlives: the database restarting, a paused or
fenced catalog (the fence stream)."""
WAIT_CODES = ("STREAM_PAUSED", "STREAM_FENCED")
"""Answers that mean "not now" for as long as an operator holds the catalog (the
fence stream during its fence): the decider tries again later, with a new case."""
RETRY_FOR_S = 300.0
"""How long one request is retried through faults before it counts as failed."""
ITEMS_PER_STREAM = 8
FEEDS = 3
PRODUCTS = 12
POISON = 3
EVIDENCE = [{"capture_id": "chaos:review", "locator": "$.title"}]


@dataclass
class ApiStats:
    decisions: int = 0
    one_item: int = 0
    multi_item: int = 0
    answer_lost: int = 0
    """Retried after a lost answer and refused STALE_REVISION: the first one committed."""
    retries: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    """Answers the workload did not expect, by code (a violation when non-empty)."""
    gave_up: int = 0
    unavailable: Counter[str] = field(default_factory=Counter)
    """5xx answers ridden out by retrying, by code (``REGISTRY_UNAVAILABLE`` from a
    writer started while the registry was down, ``HTTP 502`` from no API at all…)."""


def post_until_answered(
    http: httpx.Client,
    path: str,
    body: dict[str, Any],
    headers: dict[str, str],
    stop_retrying: Callable[[], bool] = lambda: False,
    unavailable: Counter[str] | None = None,
) -> tuple[httpx.Response | None, int]:
    """POST until an answer below 500 (or ``RETRY_FOR_S``, or ``stop_retrying``): the
    last answer (None when nothing answered) and how many attempts failed first.
    Transport errors and 5xx mean the API, its database, its object store or the
    schema registry is down; each 5xx is counted in ``unavailable`` by its code."""
    deadline = time.monotonic() + RETRY_FOR_S
    pause, failed = 0.2, 0
    response: httpx.Response | None = None
    while True:
        try:
            response = http.post(path, json=body, headers=headers)
            if response.status_code < 500 or _code(response) in WAIT_CODES:
                return response, failed
            if unavailable is not None:
                unavailable[_code(response)] += 1
        except httpx.TransportError:
            response = None
        if time.monotonic() > deadline or stop_retrying():
            return response, failed
        failed += 1
        time.sleep(pause)
        pause = min(pause * 1.5, 2.0)


def retrying_post(stop_retrying: Callable[[], bool]) -> demo_captures.Send:
    """A ``Send`` for the demo's collectors that rides out faults."""

    def send(
        http: httpx.Client, path: str, body: dict[str, Any], headers: dict[str, str]
    ) -> httpx.Response:
        response, _ = post_until_answered(http, path, body, headers, stop_retrying)
        if response is None:
            raise RuntimeError(f"POST {path}: nothing answered for {RETRY_FOR_S:.0f}s")
        return response

    return send


class Load:
    """Every thread of the workload; ``start`` once set up, ``stop`` when the faults
    end (each thread finishes what it is doing)."""

    def __init__(
        self,
        databases: DatabaseSettings,
        api_url: str,
        operator_token: str,
        mint: Callable[[str], str],
        run_id: str,
        echo: Echo,
        writers: int = 3,
        pace_s: float = 0.05,
    ) -> None:
        self.databases = databases
        self.api_url = api_url
        self.operator_token = operator_token
        self.mint = mint
        self.run_id = run_id
        self.echo = echo
        self.writers = writers
        self.pace_s = pace_s
        self.domain_streams = [(f"{run_id}-w{t}", f"catalog{c}") for t in (1, 2) for c in (1, 2)]
        self.api_streams = [(f"{run_id}-api{t}", "catalog1") for t in (1, 2)]
        self.fence_stream = (f"{run_id}-fence", "catalog1")
        self.capture_tenants = [(f"{run_id}-cap{t}", "catalog1") for t in (1, 2)]
        self.stop_event = threading.Event()
        self.workload = WorkloadStats()
        self.api = ApiStats()
        self.captures = demo_captures.CaptureStats()
        self.poison: list[bytes] = []
        self.events_written = 0
        """The domain writers' events so far (their stats arrive when they stop)."""
        self.errors: list[str] = []
        self._threads: list[threading.Thread] = []
        self._pool = ConnectionPool(databases.resolver_dsn, min_size=1, max_size=writers + 2)
        self._epochs = EpochSource(databases.control_dsn)
        self._codec = codec_for(SchemaRegistrySettings())

    @property
    def tenant_like(self) -> str:
        return f"{self.run_id}-%"

    # Before the faults: what every later step builds on.

    def set_up(self, kafka: KafkaSettings) -> None:
        """Items for the API deciders, the collectors' credentials and identity
        generations, and the poison (sent first: it is delivered before any fault)."""
        for tenant, catalog in [*self.api_streams, self.fence_stream]:
            items = [
                ItemChange(tenant, catalog, f"i{n}", "lamp", f"lamp {n}")
                for n in range(ITEMS_PER_STREAM)
            ]
            self._record(self._rule(tenant, catalog, items))
        self._collectors(self.capture_tenants)
        producer = Producer(kafka.client_config())
        for n in range(POISON):
            value = f"\x00chaos poison {self.run_id} {n}".encode()
            producer.produce(kafka.events_topic, value=value, key=b"\xff not a stream key")
            self.poison.append(value)
        if producer.flush(30) != 0:
            raise RuntimeError("the poison messages were not delivered")

    def start(self) -> None:
        self._spawn("writers", self._write)
        for stream in [*self.api_streams, self.fence_stream]:
            self._spawn(f"decider {stream[0]}", functools.partial(self._decide, stream))
        self._spawn("collectors", self._collect)

    def stop(self, timeout: float = 120.0) -> None:
        self.stop_event.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                self.errors.append(f"{thread.name} did not finish within {timeout:.0f}s")
        self._pool.close()
        self._epochs.close()

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        def guarded() -> None:
            try:
                target()
            except Exception as exc:  # the campaign reports it as a violation
                self.errors.append(f"{name}: {type(exc).__name__}: {exc}")

        thread = threading.Thread(target=guarded, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    # The threads.

    def _write(self) -> None:
        self.workload = run_workload(
            self._pool,
            self._epochs,
            self.domain_streams,
            events=10**9,
            writers=self.writers,
            stop=self.stop_event,
            pace_seconds=self.pace_s,
            id_tag="c",
            transient=TRANSIENT,
            progress=self._written,
        )

    def _written(self, events: int) -> None:
        self.events_written = events

    def _collect(self) -> None:
        """Rounds of feeds until the load stops: the first on the tenants set up
        before the faults, each later one on two new tenants (their credentials and
        identity generations made then, again after a fault), so captures, evidence
        puts and checkpoints go on throughout."""
        send = retrying_post(self.stop_event.is_set)
        tenants = self.capture_tenants
        rounds = 0
        attempt = 0
        while not self.stop_event.is_set():
            try:
                stats = demo_captures.post_feeds(
                    self.api_url, self.mint, tenants, FEEDS, PRODUCTS, self.echo, send=send
                )
            except (httpx.HTTPError, RuntimeError):
                if self.stop_event.is_set():
                    return  # a post cut short as the load stops: its outcome is the store's
                raise
            self.captures.posted += stats.posted
            self.captures.repeated_posts += stats.repeated_posts
            rounds += 1
            while not self.stop_event.is_set():
                # Fresh tenants each attempt: one a fault cut short may be half set up.
                attempt += 1
                tenants = [(f"{self.run_id}-cap{rounds}x{attempt}t{t}", "catalog1") for t in (1, 2)]
                try:
                    self._collectors(tenants)
                    break
                except (psycopg.Error, httpx.HTTPError, RuntimeError) as exc:
                    self.echo(f"  collectors of round {rounds}: {exc}; again")
                    self.stop_event.wait(2.0)

    def _collectors(self, tenants: list[tuple[str, str]]) -> None:
        demo_captures.register_collectors(self.databases, tenants)
        headers = {"Authorization": f"Bearer {self.operator_token}"}
        with httpx.Client(base_url=self.api_url, headers=headers, timeout=30.0) as api:
            demo_captures.activate_identity(api, tenants)

    def _decide(self, stream: tuple[str, str]) -> None:
        tenant, catalog = stream
        rng = random.Random(f"{self.run_id}/{tenant}")
        items = [f"i{n}" for n in range(ITEMS_PER_STREAM)]
        window = datetime(2027, 1, 1, tzinfo=UTC)
        listing = 0
        headers = {"Authorization": f"Bearer {self.operator_token}"}
        with httpx.Client(base_url=self.api_url, headers=headers, timeout=15.0) as http:
            while not self.stop_event.wait(self.pace_s * 4):
                case = self._open_case(tenant, catalog)
                if case is None:
                    continue
                multi = rng.random() < 0.4
                facts: list[dict[str, Any]] = []
                for _ in range(3 if multi else 1):
                    listing += 1
                    facts.append(
                        {
                            "kind": "map_listing",
                            "listing_id": f"L{listing}",
                            "item_id": rng.choice(items),
                        }
                    )
                if multi:
                    facts.append(
                        {
                            "kind": "shipping_policy_version",
                            "policy_id": "std",
                            "scope": "DE",
                            "effective_from": window.isoformat(),
                            "effective_to": (window + timedelta(days=30)).isoformat(),
                            "terms": {"rate": f"{rng.randint(3, 9)}.90"},
                        }
                    )
                body = {
                    "actor": "reviewer:chaos",
                    "rationale": "the listing shows this product",
                    "evidence": EVIDENCE,
                    "expected_revision": 1,
                    "action": "map",
                    "facts": facts,
                }
                path = f"/v1/tenants/{tenant}/catalogs/{catalog}/review-cases/{case}/decisions"
                response, failed = post_until_answered(
                    http, path, body, {}, self.stop_event.is_set, self.api.unavailable
                )
                self.api.retries += failed
                code = _code(response) if response is not None else None
                if code in WAIT_CODES:
                    self.stop_event.wait(1.0)  # the fence stream while it is paused
                    continue
                if response is None or response.status_code >= 500:
                    if not self.stop_event.is_set():  # else: given up as the load stops
                        self.api.gave_up += 1
                    continue
                if response.status_code == 201:
                    self.api.decisions += 1
                    if multi:
                        self.api.multi_item += 1
                        window += timedelta(days=30)
                    else:
                        self.api.one_item += 1
                    continue
                if code == "STALE_REVISION" and failed:
                    self.api.answer_lost += 1
                    if multi:
                        window += timedelta(days=30)
                    continue
                self.api.refused[f"{response.status_code} {code}"] += 1

    # Writes made in this process.

    def _open_case(self, tenant: str, catalog: str) -> str | None:
        """A new review case (a fresh id each attempt: an earlier one whose answer was
        lost stays open and unused, which harms nothing)."""
        case = f"case-{uuid.uuid4().hex[:12]}"
        try:
            with UnitOfWork(self._pool, self._epochs, self._codec) as uow:
                open_case(uow, tenant, catalog, case, "listing", case)
                uow.commit()
        except TRANSIENT:
            self.stop_event.wait(0.3)
            return None
        return case

    def _rule(self, tenant: str, catalog: str, items: list[ItemChange]) -> Decision:
        return Decision(
            tenant,
            catalog,
            "accept",
            "rule:chaos",
            "the source lists these",
            (EvidenceRef(capture_id="chaos:items", locator="$.items"),),
            facts=tuple(items),
            actor_kind="rule",
        )

    def _record(self, decision: Decision) -> None:
        with UnitOfWork(self._pool, self._epochs, self._codec) as uow:
            record_decision(uow, decision)


def _code(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return "?"
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            return str(error.get("code", "?"))
        return str(body.get("code", "?"))
    return "?"
