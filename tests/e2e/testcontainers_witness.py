"""Run last in the child session of ``test_testcontainers.py`` (its name keeps it out of
a normal collection): that PostgreSQL, Kafka, S3 and the schema registry, reached
through the variables and the URL the tests read, are the containers the provider
started, by what each holds inside its container (the registry, whose schemas are
in the PostgreSQL container: by the process holding its port, and by its rows there);
and a report of them for the parent to hold against podman's event log.
"""

from __future__ import annotations

import json
import os
import re
import urllib.request
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import boto3
import psycopg
from botocore.config import Config
from confluent_kafka.admin import AdminClient
from testcontainers.core.docker_client import DockerClient

from db.settings import DatabaseSettings
from infra.local.ports import holders
from schemas.settings import KafkaSettings, ObjectStoreSettings
from tests.fixtures.providers import Provided

REPORT_VARIABLE = "GAPLESS_TEST_SERVICES_REPORT"


def test_the_services_the_tests_reached_are_the_containers(
    services: dict[str, str],
    provided_services: Provided,
    registry_url: str,
    db_settings: DatabaseSettings,
    kafka_settings: KafkaSettings,
) -> None:
    assert provided_services.name == "testcontainers"
    containers = provided_services.containers
    assert set(containers) == {"postgres", "kafka", "s3", "registry"}
    engine = DockerClient().client

    def inside(service: str, *command: str) -> str:
        result = engine.containers.get(containers[service].id).exec_run(list(command))
        assert result.exit_code == 0, f"{service}: {command}: {result.output!r}"
        return str(result.output.decode())

    # PostgreSQL: the cluster behind every DSN is the container's (its system identifier).
    identifiers = set()
    for dsn in (db_settings.resolver_dsn, db_settings.resolver_owner_dsn, db_settings.product_dsn):
        with psycopg.connect(dsn) as conn:
            row = conn.execute("SELECT system_identifier::text FROM pg_control_system()").fetchone()
            assert row is not None
            identifiers.add(row[0])
    control = inside("postgres", "pg_controldata", "/var/lib/postgresql/data")
    found = re.search(r"Database system identifier:\s+(\d+)", control)
    assert found is not None, control
    assert identifiers == {found.group(1)}

    # Kafka: the broker's cluster id is the one formatted into the container's storage.
    admin = AdminClient({"bootstrap.servers": kafka_settings.kafka_bootstrap})
    cluster_id = admin.describe_cluster().result(timeout=30).cluster_id
    meta = inside("kafka", "cat", "/var/lib/kafka/data/meta.properties")
    assert f"cluster.id={cluster_id}" in meta.splitlines(), meta

    # S3: an object put through the endpoint is a file in the container's data directory.
    store = ObjectStoreSettings()
    assert store.s3_access_key is not None and store.s3_secret_key is not None
    s3 = boto3.client(
        "s3",
        endpoint_url=store.s3_endpoint,
        aws_access_key_id=store.s3_access_key.get_secret_value(),
        aws_secret_access_key=store.s3_secret_key.get_secret_value(),
        region_name=store.s3_region,
        config=Config(s3={"addressing_style": "path"}),
    )
    key, body = f"witness-{uuid.uuid4().hex}", uuid.uuid4().hex
    s3.put_object(Bucket=store.evidence_bucket, Key=key, Body=body.encode())
    assert inside("s3", "cat", f"/var/lib/s3/data/{store.evidence_bucket}/{key}") == body

    # The registry: its API answers at the URL the tests used, from the container's
    # process (host networking: the listening socket is the container's main process's).
    assert urlsplit(registry_url).port == containers["registry"].port
    with urllib.request.urlopen(registry_url + "/subjects", timeout=10) as response:
        assert json.loads(response.read()), "the registry tests registered no subject"
    pid = engine.containers.get(containers["registry"].id).attrs["State"]["Pid"]
    assert pid in {holder.pid for holder in holders(containers["registry"].port)}
    # ...which keeps what it was given in the PostgreSQL container: every schema the
    # tests registered is a row of its storage's, so none is forgotten on a restart.
    registry_dsn = db_settings.resolver_owner_dsn.rsplit("/", 1)[0] + "/registry"
    with psycopg.connect(registry_dsn) as conn:
        stored = conn.execute("SELECT count(*) FROM content").fetchone()
    assert stored is not None and stored[0] > 0, "no schema in the registry's storage"

    report = {
        "engine_version": engine.version().get("Version"),
        "containers": {
            service: {
                "id": container.id,
                "image": container.image,
                "port": container.port,
                "network_mode": engine.containers.get(container.id).attrs["HostConfig"][
                    "NetworkMode"
                ],
            }
            for service, container in containers.items()
        },
        "environment": {
            "resolver_dsn": db_settings.resolver_dsn,
            "resolver_owner_dsn": db_settings.resolver_owner_dsn,
            "product_dsn": db_settings.product_dsn,
            "control_dsn": db_settings.control_dsn,
            "kafka_bootstrap": kafka_settings.kafka_bootstrap,
            "s3_endpoint": store.s3_endpoint,
            "registry_url": registry_url,
        },
    }
    Path(os.environ[REPORT_VARIABLE]).write_text(json.dumps(report, indent=2))
