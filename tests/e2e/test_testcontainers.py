"""The testcontainers provider (``GAPLESS_TEST_SERVICES=testcontainers``), proven here
against podman's Docker-compatible socket rather than only declared.

The test starts ``podman system service`` on a socket under ``.local/`` with the
project's podman configuration (so the engine sees the images
``infra.image.service_images`` builds into the project's storage), then runs a
representative subset of the integration tests in a child pytest with the provider
selected, ``DOCKER_HOST`` at that socket and ``TESTCONTAINERS_RYUK_DISABLED=true``
(Ryuk's image would have to be pulled). It passes only if every one of them passes
against the containers, and if the witness (``testcontainers_witness.py``, last in the
child's session) finds that PostgreSQL, Kafka, S3 and the schema registry as the tests
reached them were the containers; its report is then held against podman's event log,
the configured port range and the local services' ports.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import docker
import pytest

from infra.image.podman import config_dir, ensure_installed, environment
from infra.local import ServiceError
from infra.local.layout import current_layout
from infra.local.processes import wait_until
from tests.fixtures.providers import VARIABLE
from tests.fixtures.providers.containers import port_range

REPO = Path(__file__).resolve().parents[2]
SUBSET = (
    "tests/integration/db/test_migrations.py",
    "tests/integration/db/test_stream_writer.py",
    "tests/integration/producers/relay/test_relay.py",
    "tests/integration/producers/capture/evidence_retention/test_sweep.py",
    "tests/integration/processors/agents/test_probes.py",
    "tests/integration/schemas/test_registry_codec.py",
)
"""Migrations, the cursor lock and outbox, the relay publishing to Kafka, the evidence
store on S3, the agents as a process, the Confluent framing through the registry."""
WITNESS = "tests/e2e/testcontainers_witness.py"
CHILD_TIMEOUT = 540


@pytest.fixture(scope="module")
def podman_socket() -> Iterator[str]:
    """``podman system service --time=0`` on ``.local/podman.sock``, until the module ends."""
    layout = current_layout()
    try:
        ensure_installed(lambda line: print(line, file=sys.stderr))
    except ServiceError as exc:
        pytest.fail(f"podman is not available here:\n{exc}")
    socket = layout.local / "podman.sock"
    socket.unlink(missing_ok=True)
    url = f"unix://{socket}"
    log = layout.log_file("podman-service")
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as sink:
        service = subprocess.Popen(
            ["podman", "system", "service", "--time=0", url],
            env=environment(layout),
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )

    def answers() -> bool:
        assert service.poll() is None, f"podman system service exited; see {log}"
        try:
            return bool(docker.DockerClient(base_url=url, timeout=5).ping())
        except docker.errors.DockerException:
            return False

    try:
        assert wait_until(answers, timeout=60), f"podman's socket did not answer; see {log}"
        yield url
    finally:
        service.terminate()
        service.wait(timeout=30)


def test_the_integration_subset_passes_against_containers_the_engine_ran(
    podman_socket: str, tmp_path: Path
) -> None:
    layout = current_layout()
    report_file, junit = tmp_path / "report.json", tmp_path / "junit.xml"
    env = {
        **os.environ,
        VARIABLE: "testcontainers",
        "DOCKER_HOST": podman_socket,
        "TESTCONTAINERS_RYUK_DISABLED": "true",
        "GAPLESS_TEST_SERVICES_REPORT": str(report_file),
    }
    child = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
            f"--junitxml={junit}", *SUBSET, WITNESS,
        ],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
    )  # fmt: skip
    output = (child.stdout + child.stderr)[-6000:]
    assert child.returncode == 0, output

    # Every file of the subset ran and passed (none skipped), and so did the witness.
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None, output
    for counter in ("failures", "errors", "skipped"):
        assert suite.get(counter) == "0", output
    classnames = [case.get("classname", "") for case in suite.iter("testcase")]
    for path in (*SUBSET, WITNESS):
        module = path.removesuffix(".py").replace("/", ".")
        ran = [name for name in classnames if name == module or name.startswith(module + ".")]
        assert ran, f"{path} ran no test:\n{output}"

    report = json.loads(report_file.read_text())
    containers = report["containers"]
    assert set(containers) == {"postgres", "kafka", "s3", "registry"}
    ports = {service: container["port"] for service, container in containers.items()}
    local = {
        layout.pg_port,
        layout.kafka_port,
        layout.kafka_controller_port,
        layout.s3_port,
        layout.registry_port,
        layout.registry_management_port,
    }
    for service, container in containers.items():
        assert container["image"].startswith(f"localhost/gapless-{service}:"), container
        assert container["network_mode"] == "host", container
        assert container["port"] in port_range() and container["port"] not in local, container

    # The variables the tests read named the containers' ports.
    environment_ = report["environment"]
    for name in ("resolver_dsn", "resolver_owner_dsn", "product_dsn", "control_dsn"):
        assert urlsplit(environment_[name]).port == ports["postgres"], environment_
    assert environment_["kafka_bootstrap"] == f"127.0.0.1:{ports['kafka']}"
    assert urlsplit(environment_["s3_endpoint"]).port == ports["s3"]
    assert urlsplit(environment_["registry_url"]).port == ports["registry"]

    # podman itself ran each container from its image.
    started = set()
    for line in (config_dir(layout) / "events.log").read_text().splitlines():
        event = json.loads(line)
        if event.get("Type") == "container" and event.get("Status") == "start":
            started.add((event["ID"], event["Image"]))
    for container in containers.values():
        assert (container["id"], container["image"]) in started, container
