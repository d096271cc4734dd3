"""One capture is one trace, from the API request to the agents' apply of its events,
in a real Jaeger.

The resolver API, the capture worker, the relay, the agents and the read API run as
deployed processes exporting over OTLP to the Jaeger the ``jaeger`` fixture runs.
A collector posts one capture and an operator approves identity generations (each
approval a decision over HTTP). Jaeger must then hold, for the capture, one trace
whose root is the API's ``POST /v1/captures`` span, with ``capture run`` under it,
``capture decide`` under that, a ``relay publish`` under each decision's span for
every event the decisions wrote, and an ``agents apply`` (applied) under each
``relay publish``; for each approval, one trace from its request through ``relay
publish`` to ``agents apply``. The API's JSON log line of each request carries its
trace id, and the probes are never traced.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from db.settings import DatabaseSettings
from infra.demo import captures
from infra.local.collector_keys import mint
from infra.local.layout import current_layout
from infra.processes import Deployed, free_port
from tests.fixtures.jaeger import Jaeger, Span, Trace
from tests.fixtures.waits import wait_for

CAPTURE = "POST /v1/captures"
APPROVAL = (
    "POST /v1/tenants/{tenant_id}/catalogs/{catalog_id}/identity-generations"
    "/{class_id:path}/{generation:int}/approval"
)
RUN, DECIDE, PUBLISH, APPLY = "capture run", "capture decide", "relay publish", "agents apply"
PRODUCTS = 3


def _processes(topic: str, jaeger: Jaeger, logs: Path) -> dict[str, Deployed]:
    api, relay, agents, worker, read = (free_port() for _ in range(5))
    api_url = f"http://127.0.0.1:{api}"
    env = dict(
        os.environ,
        GAPLESS_EVENTS_TOPIC=topic,
        GAPLESS_RESOLVER_API_PORT=str(api),
        GAPLESS_RESOLVER_URL=api_url,
        GAPLESS_LOG_FORMAT="json",
        OTEL_EXPORTER_OTLP_ENDPOINT=jaeger.otlp_endpoint,
        OTEL_BSP_SCHEDULE_DELAY="200",  # ms: spans reach Jaeger soon after they end
    )

    def process(name: str, port: int, health: str = "readyz", **extra: str) -> Deployed:
        url = f"http://127.0.0.1:{port}/{health}"
        return Deployed(name, [name], {**env, **extra}, logs / f"{name}.log", url)

    return {
        "resolver-api": process("resolver-api", api),
        "relay": process("relay", relay, GAPLESS_RELAY_HTTP_PORT=str(relay)),
        "agents": process(
            "agents",
            agents,
            GAPLESS_AGENTS_APP_ID=f"tracing-{uuid.uuid4().hex[:8]}",
            GAPLESS_AGENTS_WEB_PORT=str(agents),
        ),
        "resolver-worker": process("resolver-worker", worker, GAPLESS_WORKER_HTTP_PORT=str(worker)),
        "read-api": process("read-api", read, GAPLESS_READ_API_PORT=str(read)),
    }


@pytest.fixture()
def running(
    clean_db: DatabaseSettings, topic: str, jaeger: Jaeger, tmp_path: Path
) -> Iterator[dict[str, Deployed]]:
    processes = _processes(topic, jaeger, tmp_path)
    try:
        for p in processes.values():
            p.start()
        wait_for(
            lambda: all(p.health() == 200 for p in processes.values()),
            "every process ready",
            120,
        )
        yield processes
    finally:
        for p in reversed(list(processes.values())):
            p.stop()


def _url(process: Deployed) -> str:
    assert process.health_url is not None
    return process.health_url.rsplit("/", 1)[0]


def _traced_rows(settings: DatabaseSettings, trace_id: str) -> int:
    """The outbox rows the writers stored with a traceparent of ``trace_id``."""
    with psycopg.connect(settings.resolver_dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM outbox WHERE trace_context LIKE %s", (f"00-{trace_id}-%",)
        ).fetchone()
    return int(row[0]) if row else 0


def _chain(trace: Trace, span: Span) -> list[tuple[str, str]]:
    """(service, name) of ``span`` and each ancestor, up to the trace's root."""
    return [(s.service, s.name) for s in trace.ancestry(span)]


def _capture_trace_whole(jaeger: Jaeger, trace_id: str, events: int) -> Trace | None:
    """The capture's trace once every event's ``agents apply`` has arrived."""
    trace = jaeger.trace(trace_id)
    if trace is None or len(trace.named(APPLY)) < events or len(trace.named(PUBLISH)) < events:
        return None
    return trace


def _log_lines(process: Deployed) -> list[dict[str, object]]:
    lines = []
    for text in process.log.read_text(errors="replace").splitlines():
        if text.startswith("{"):
            lines.append(json.loads(text))
    return lines


def _posts(process: Deployed, path: str) -> set[str]:
    """The trace ids of the API's access-log lines for POST requests to ``path``."""
    return {
        str(line["trace_id"])
        for line in _log_lines(process)
        if "trace_id" in line and f'"POST {path}' in str(line["msg"])
    }


def test_one_capture_is_one_trace_from_the_request_to_the_agents(
    running: dict[str, Deployed], clean_db: DatabaseSettings, jaeger: Jaeger
) -> None:
    tenant = f"trace-{uuid.uuid4().hex[:8]}"
    api = _url(running["resolver-api"])
    captures.register_collectors(clean_db, [(tenant, "c1")])
    operator = {"Authorization": f"Bearer {os.environ['GAPLESS_RESOLVER_TOKEN']}"}
    with httpx.Client(base_url=api, headers=operator, timeout=30) as http:
        captures.activate_identity(http, [(tenant, "c1")])
    token = mint(current_layout(), captures.client_id(tenant))
    body = captures._capture(captures._feed(0, PRODUCTS))
    answer = httpx.post(
        f"{api}/v1/captures",
        json=body,
        headers={"Authorization": f"Bearer {token}", "Idempotency-Key": f"{tenant}-feed"},
        timeout=30,
    )
    assert answer.status_code == 201, answer.text
    capture_id = answer.json()["capture_id"]

    # The run's span names the capture: the trace it belongs to is the capture's.
    def runs() -> list[Trace]:
        return jaeger.find("resolver-worker", RUN, {"gapless.capture_id": capture_id})

    wait_for(lambda: bool(runs()), "the capture's run in Jaeger", 120)
    found = runs()
    assert len(found) == 1, [t.trace_id for t in found]
    trace_id = found[0].trace_id
    events = _traced_rows(clean_db, trace_id)
    assert events >= PRODUCTS, "each product's decision writes its events with the trace"
    wait_for(
        lambda: _capture_trace_whole(jaeger, trace_id, events) is not None,
        f"{events} events of the capture applied in its trace",
        120,
    )
    trace = _capture_trace_whole(jaeger, trace_id, events)
    assert trace is not None
    logs = "\n".join(p.tail() for p in running.values())

    # One root: the API's request; every span of the capture below it.
    (root,) = trace.roots()
    assert (root.service, root.name) == ("resolver-api", CAPTURE), logs
    assert len(trace.named(RUN)) == 1
    assert len(trace.named(DECIDE)) == PRODUCTS
    assert len(trace.named(PUBLISH)) == len(trace.named(APPLY)) == events
    for span in trace.named(APPLY):
        assert _chain(trace, span) == [
            ("agents", APPLY),
            ("relay", PUBLISH),
            ("resolver-worker", DECIDE),
            ("resolver-worker", RUN),
            ("resolver-api", CAPTURE),
        ], logs
        assert span.tags["gapless.outcome"] == "applied"
        assert str(span.tags["gapless.stream"]).startswith(f"{tenant}/c1@")
        assert {"gapless.position", "gapless.event_id", "gapless.event_type"} <= set(span.tags)
    # The API's JSON log line of the request carries the trace's id.
    assert trace_id in _posts(running["resolver-api"], "/v1/captures"), logs


def test_a_decision_over_http_is_one_trace_and_probes_are_not_traced(
    running: dict[str, Deployed], clean_db: DatabaseSettings, jaeger: Jaeger
) -> None:
    tenant = f"trace-{uuid.uuid4().hex[:8]}"
    api = _url(running["resolver-api"])
    operator = {"Authorization": f"Bearer {os.environ['GAPLESS_RESOLVER_TOKEN']}"}
    with httpx.Client(base_url=api, headers=operator, timeout=30) as http:
        approved = captures.activate_identity(http, [(tenant, "c1")])
    logged = _posts(running["resolver-api"], f"/v1/tenants/{tenant}/")
    assert len(logged) >= approved  # the creations' lines too, each a trace of its own

    def decisions() -> list[Trace]:
        """The approvals' traces whose events have all been applied."""
        whole = []
        for trace_id in logged:
            trace = jaeger.trace(trace_id)
            if trace is None or not trace.named(APPROVAL):
                continue
            rows = _traced_rows(clean_db, trace_id)
            assert rows > 0, "an approval is a decision: it writes events"
            if len(trace.named(APPLY)) == rows:
                whole.append(trace)
        return whole

    wait_for(lambda: len(decisions()) == approved, f"{approved} approvals applied", 120)
    for trace in decisions():
        (root,) = trace.roots()
        assert (root.service, root.name) == ("resolver-api", APPROVAL)
        for span in trace.named(APPLY):
            assert _chain(trace, span) == [
                ("agents", APPLY),
                ("relay", PUBLISH),
                ("resolver-api", APPROVAL),
            ]

    # The read API traces its requests too, never its probes (nor anyone's).
    read = _url(running["read-api"])
    answer = httpx.get(
        f"{read}/v1/tenants/{tenant}/catalogs/c1/search", params={"q": "lamp"}, headers=operator
    )
    assert answer.status_code in (200, 404), answer.text
    search = "GET /v1/tenants/{tenant_id}/catalogs/{catalog_id}/search"
    wait_for(lambda: search in jaeger.operations("read-api"), "the read API's span", 60)
    for service in ("read-api", "resolver-api", "relay", "agents", "resolver-worker"):
        named = jaeger.operations(service)
        assert not any(p in name for name in named for p in ("healthz", "readyz", "metrics"))
