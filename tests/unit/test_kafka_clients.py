"""Every Kafka client the project builds carries the ``GAPLESS_KAFKA_*`` security
settings: librdkafka's clients through ``client_config``, the agents' Faust app
through its broker credentials.

Two guards over the source (the AST, nothing imported): every ``Producer``,
``Consumer`` and ``AdminClient`` is built from ``client_config`` (or the relay's
``producer_config``, which calls it), and no module reads ``kafka_bootstrap`` but
the settings themselves and the Faust app (its broker URL; the credentials go
beside it). Then each builder, given settings with SASL over TLS, hands the client a
configuration holding them. The bench and the local launchers talk to the local
broker only and are left out.
"""

from __future__ import annotations

import ast
import uuid
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import faust
import pytest

from schemas.settings import KafkaSettings

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("schemas", "db", "producers", "processors", "infra")
LOCAL_ONLY = ("infra/bench/", "infra/local/")
CLIENTS = {"Producer", "Consumer", "AdminClient"}
BUILDERS = {"client_config", "producer_config"}
READS_BOOTSTRAP = {"schemas/settings.py", "processors/app.py"}

SECURITY = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-256",
    "sasl.username": "reader",
    "sasl.password": "pw",
}


def _sources() -> list[tuple[str, ast.Module]]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if not name.startswith(LOCAL_ONLY):
                found.append((name, ast.parse(path.read_text())))
    return found


def _called(node: ast.expr) -> str | None:
    if isinstance(node, ast.Call):
        f = node.func
        return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
    return None


def test_every_client_is_built_from_client_config() -> None:
    bare = []
    seen = 0
    for name, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _called(node) in CLIENTS:
                seen += 1
                first = node.args[0] if node.args else None
                if first is None or _called(first) not in BUILDERS:
                    bare.append(f"{name}:{node.lineno}")
    assert seen >= 10, "the scan found too few Kafka clients to be looking in the right place"
    assert bare == [], "Kafka clients built without client_config: " + ", ".join(bare)


def test_nothing_else_reads_the_bootstrap_list() -> None:
    readers = sorted(
        f"{name}:{node.lineno}"
        for name, tree in _sources()
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr == "kafka_bootstrap"
        and name not in READS_BOOTSTRAP
    )
    assert readers == [], "use client_config() instead: " + ", ".join(readers)


class Built(Exception):
    """Raised by the fake client once it has its configuration."""


@pytest.fixture()
def secured(monkeypatch: pytest.MonkeyPatch) -> KafkaSettings:
    monkeypatch.setenv("GAPLESS_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("GAPLESS_KAFKA_SASL_MECHANISM", "SCRAM-SHA-256")
    monkeypatch.setenv("GAPLESS_KAFKA_SASL_USERNAME", "reader")
    monkeypatch.setenv("GAPLESS_KAFKA_SASL_PASSWORD", "pw")
    return KafkaSettings()


def _capture(monkeypatch: pytest.MonkeyPatch, target: str) -> list[dict[str, Any]]:
    configs: list[dict[str, Any]] = []

    def client(config: dict[str, Any], *_args: Any, **_kwargs: Any) -> Any:
        configs.append(config)
        raise Built

    monkeypatch.setattr(target, client)
    return configs


def _built(configs: list[dict[str, Any]]) -> dict[str, Any]:
    assert len(configs) == 1
    return configs[0]


def test_the_relay_publisher(monkeypatch: pytest.MonkeyPatch, secured: KafkaSettings) -> None:
    from producers.relay.service import build
    from producers.relay.settings import RelaySettings

    configs = _capture(monkeypatch, "producers.relay.publisher.Producer")
    with pytest.raises(Built):
        build(RelaySettings())
    config = _built(configs)
    assert config.items() >= SECURITY.items()
    assert config["enable.idempotence"] is True


def test_the_intake_enqueuer_and_the_job_consumer(
    monkeypatch: pytest.MonkeyPatch, secured: KafkaSettings
) -> None:
    from producers.capture.intake.enqueue import JobEnqueuer
    from producers.capture.worker.consumer import job_consumer

    configs = _capture(monkeypatch, "producers.capture.intake.enqueue.Producer")
    with pytest.raises(Built):
        JobEnqueuer(secured.client_config(), "jobs", 1.0)
    assert _built(configs).items() >= SECURITY.items()

    configs = _capture(monkeypatch, "producers.capture.worker.consumer.Consumer")
    with pytest.raises(Built):
        job_consumer(secured.client_config(), "group", "jobs", "w1")
    assert _built(configs).items() >= {**SECURITY, "group.id": "group"}.items()


def test_the_agents_clients(monkeypatch: pytest.MonkeyPatch, secured: KafkaSettings) -> None:
    from processors.agents.events import EventsConsumer
    from processors.rebuild.status import StatusPublisher
    from processors.settings import AgentSettings

    agents = AgentSettings()
    configs = _capture(monkeypatch, "processors.agents.events.Consumer")
    with pytest.raises(Built):
        EventsConsumer._consumer(SimpleNamespace(_settings=agents, _number=0))  # type: ignore[arg-type]
    assert _built(configs).items() >= SECURITY.items()

    configs = _capture(monkeypatch, "processors.rebuild.status.Producer")
    with pytest.raises(Built):
        StatusPublisher(agents.client_config())
    assert _built(configs).items() >= SECURITY.items()


def test_the_faust_broker_credentials(
    monkeypatch: pytest.MonkeyPatch, secured: KafkaSettings
) -> None:
    from processors.broker import broker_credentials

    credentials = broker_credentials(secured)
    assert isinstance(credentials, faust.SASLCredentials)
    assert (credentials.username, credentials.password) == ("reader", "pw")
    assert credentials.mechanism.value == "SCRAM-SHA-256"
    assert credentials.protocol.value == "SASL_SSL"
    assert credentials.ssl_context is not None
    for name in ("MECHANISM", "USERNAME", "PASSWORD"):
        monkeypatch.delenv(f"GAPLESS_KAFKA_SASL_{name}")
    monkeypatch.setenv("GAPLESS_KAFKA_SECURITY_PROTOCOL", "SSL")
    tls = broker_credentials(KafkaSettings())
    assert isinstance(tls, faust.SSLCredentials)
    monkeypatch.delenv("GAPLESS_KAFKA_SECURITY_PROTOCOL")
    assert broker_credentials(KafkaSettings()) is None


def test_the_pause_listener(monkeypatch: pytest.MonkeyPatch, secured: KafkaSettings) -> None:
    from db.control.control_listener import ControlListener

    configs = _capture(monkeypatch, "db.control.control_listener.Consumer")
    with pytest.raises(Built):
        ControlListener(None, secured.client_config(), "control")._listen()  # type: ignore[arg-type]
    assert _built(configs).items() >= SECURITY.items()


def test_the_operator_commands(monkeypatch: pytest.MonkeyPatch, secured: KafkaSettings) -> None:
    from infra.control import publish
    from infra.tail import TailFilter, tail
    from infra.topics import ensure_topics
    from schemas.control import ControlCommand

    command = ControlCommand(
        command_id=uuid.uuid4(),
        kind="pause",
        tenant_id="t",
        catalog_id="c",
        requested_by="ana",
        reason="r",
        requested_at=datetime.now(UTC),
    )
    configs = _capture(monkeypatch, "infra.control.Producer")
    with pytest.raises(Built):
        publish(secured.client_config(), command)
    assert _built(configs).items() >= SECURITY.items()

    configs = _capture(monkeypatch, "infra.topics.AdminClient")
    with pytest.raises(Built):
        ensure_topics(secured)
    assert _built(configs).items() >= SECURITY.items()

    configs = _capture(monkeypatch, "infra.tail.Consumer")
    with pytest.raises(Built):
        next(tail(secured.client_config(), "t", TailFilter(), "end", False, None, print))
    assert _built(configs).items() >= SECURITY.items()
