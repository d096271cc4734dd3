"""The compose file (infra/deploy/compose.yaml) against the code: every gapless service
runs a real ``gapless`` command line from the one image, sets only variables a
settings class reads, takes secrets only from the environment, and waits for the
migrations to complete; the backing services are the ones the system needs."""

from __future__ import annotations

import re
from typing import Any

import yaml

from tests.fixtures.deployments import (
    DEPLOYABLE,
    FOREIGN_VARIABLES,
    command_problem,
    read_variables,
    secret_variables,
)
from tests.unit.table_writes import ROOT

COMPOSE = ROOT / "infra" / "deploy" / "compose.yaml"
INTERPOLATED = re.compile(r"^\$\{[A-Z0-9_]+:\?[^}]+\}$")
BUILD = {
    "context": "../..",
    "dockerfile": "infra/Containerfile",
    "args": {"BASE_IMAGE": "python:3.11-slim-bookworm"},
}


def _services() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = yaml.safe_load(COMPOSE.read_text())["services"]
    return services


def _ours() -> dict[str, dict[str, Any]]:
    return {name: s for name, s in _services().items() if "build" in s}


def test_every_gapless_service_is_built_from_the_one_image() -> None:
    ours = _ours()
    assert len(ours) == len(DEPLOYABLE) + 1  # the processes and the migrations
    for name, service in ours.items():
        assert service["build"] == BUILD, name
        assert service["image"] == "localhost/gapless:latest", name
        assert service["entrypoint"] == ["gapless"], name
        assert service["init"] is True, name  # SIGTERM reaches the process, zombies reaped


def test_every_command_is_a_real_gapless_command_line() -> None:
    commands = {name: s["command"] for name, s in _ours().items()}
    problems = {name: command_problem(c) for name, c in commands.items()}
    assert {n: p for n, p in problems.items() if p} == {}
    assert {c[0] for c in commands.values()} == DEPLOYABLE | {"migrate"}
    assert commands["migrate"] == ["migrate", "--no-local"]


def test_every_variable_set_is_read() -> None:
    unread = {
        name: sorted(set(s["environment"]) - read_variables() - FOREIGN_VARIABLES)
        for name, s in _ours().items()
    }
    assert {n: u for n, u in unread.items() if u} == {}


def test_secrets_come_from_the_environment_only() -> None:
    secrets = secret_variables() | FOREIGN_VARIABLES
    literal = {
        f"{name}.{variable}"
        for name, s in _ours().items()
        for variable, value in s["environment"].items()
        if variable in secrets and not INTERPOLATED.match(str(value))
    }
    assert literal == set()
    for name, s in _services().items():
        for variable, value in (s.get("environment") or {}).items():
            if re.search(r"PASSWORD|SECRET|ACCESS_KEY|TOKEN", variable):
                assert INTERPOLATED.match(str(value)), f"{name}.{variable}"


def test_services_with_a_database_wait_for_the_migrations() -> None:
    for name, service in _ours().items():
        depends = service["depends_on"]
        if name == "migrate":
            assert depends["postgres"] == {"condition": "service_healthy"}
            continue
        assert depends["migrate"] == {"condition": "service_completed_successfully"}, name
        assert depends["resolver-login"] == {"condition": "service_completed_successfully"}
    login = _services()["resolver-login"]
    assert login["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}


def test_the_backing_services_are_the_ones_the_system_needs() -> None:
    images = {name: s["image"] for name, s in _services().items() if "build" not in s}
    assert images["postgres"].startswith("postgres:15")
    assert images["kafka"].startswith("apache/kafka:4.")
    assert images["s3"].startswith("versity/versitygw:")
    assert images["registry"].startswith("apicurio/apicurio-registry:3.")
    registry = _services()["registry"]["environment"]
    assert registry["APICURIO_STORAGE_KIND"] == "sql"  # durable: ids survive a restart
    assert registry["APICURIO_DATASOURCE_URL"] == "jdbc:postgresql://postgres:5432/registry"
    databases = (COMPOSE.parent / "compose" / "databases.sql").read_text()
    assert "CREATE DATABASE registry;" in databases
    kafka = _services()["kafka"]["environment"]
    assert kafka["KAFKA_PROCESS_ROLES"] == "broker,controller"  # KRaft, no ZooKeeper


def test_every_process_gets_the_tracing_endpoint_when_it_is_set() -> None:
    for name, service in _ours().items():
        assert service["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"] == (
            "${OTEL_EXPORTER_OTLP_ENDPOINT:-}"
        ), name
