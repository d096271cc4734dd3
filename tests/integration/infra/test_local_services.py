"""The services `gapless up` starts are real and usable: PostgreSQL, Kafka, S3.

These tests start the services if needed and leave them running (other suites
and developers share them); `down` is exercised by hand, not here.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import boto3
import psycopg
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from confluent_kafka.admin import AdminClient, NewTopic

from db.tables.domain import APP_ROLE
from infra.local import ServiceError
from infra.local.layout import current_layout
from infra.local.postgres import APP_LOGIN
from infra.local.services import local_environment, status, up

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


@pytest.fixture(scope="module")
def env() -> dict[str, str]:
    try:
        up(lambda _message: None)
    except ServiceError as exc:
        pytest.fail(f"gapless local services did not start:\n{exc}")
    return local_environment()


@pytest.fixture
def s3(env: dict[str, str]) -> S3Client:
    return boto3.client(
        "s3",
        endpoint_url=env["GAPLESS_S3_ENDPOINT"],
        aws_access_key_id=env["GAPLESS_S3_ACCESS_KEY"],
        aws_secret_access_key=env["GAPLESS_S3_SECRET_KEY"],
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}),
    )


@pytest.fixture
def object_key(s3: S3Client, env: dict[str, str]) -> Iterator[str]:
    key = f"tests/{uuid.uuid4()}"
    yield key
    s3.delete_object(Bucket=env["GAPLESS_EVIDENCE_BUCKET"], Key=key)


@pytest.mark.parametrize(
    "variable",
    [
        "GAPLESS_RESOLVER_DSN",
        "GAPLESS_RESOLVER_MIGRATION_DSN",
        "GAPLESS_PRODUCT_DSN",
        "GAPLESS_CONTROL_DSN",
    ],
)
def test_each_database_accepts_a_connection(env: dict[str, str], variable: str) -> None:
    with psycopg.connect(env[variable], connect_timeout=5) as connection:
        name = connection.execute("SELECT current_database()").fetchone()
    assert name is not None
    assert env[variable].endswith("/" + str(name[0]))


def test_the_resolver_services_log_in_with_only_the_application_roles_grants(
    env: dict[str, str],
) -> None:
    with psycopg.connect(env["GAPLESS_RESOLVER_DSN"], connect_timeout=5) as connection:
        row = connection.execute(
            "SELECT current_user, r.rolsuper, r.rolcreatedb, r.rolcreaterole,"
            " pg_has_role(current_user, %s, 'USAGE') FROM pg_roles r"
            " WHERE r.rolname = current_user",
            (APP_ROLE,),
        ).fetchone()
    assert row == (APP_LOGIN, False, False, False, True)


def test_btree_gist_is_available_in_resolver(env: dict[str, str]) -> None:
    with psycopg.connect(env["GAPLESS_RESOLVER_MIGRATION_DSN"], autocommit=True) as connection:
        connection.execute("CREATE EXTENSION IF NOT EXISTS btree_gist")
        found = connection.execute(
            "SELECT 1 FROM pg_extension WHERE extname = 'btree_gist'"
        ).fetchone()
    assert found == (1,)


def test_kafka_admin_creates_and_deletes_a_topic(env: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": env["GAPLESS_KAFKA_BOOTSTRAP"]})
    topic = f"test-local-services-{uuid.uuid4().hex[:12]}"

    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])[topic].result(
        timeout=30
    )
    metadata = admin.list_topics(timeout=10)
    assert topic in metadata.topics
    assert len(metadata.topics[topic].partitions) == 3

    admin.delete_topics([topic])[topic].result(timeout=30)
    deadline = time.monotonic() + 30
    while topic in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"topic {topic} still listed 30 s after deletion"
        time.sleep(0.5)


def test_kafka_broker_logs_through_log4j(env: dict[str, str]) -> None:
    # Guards the slf4j 1.7 vs 2 mismatch: with it, the broker silently logs nothing.
    layout = current_layout()
    assert "Kafka Server started" in layout.log_file("kafka").read_text()
    assert "SLF4J" not in (layout.logs / "kafka.stdout.log").read_text()


def test_s3_put_then_get(s3: S3Client, env: dict[str, str], object_key: str) -> None:
    bucket = env["GAPLESS_EVIDENCE_BUCKET"]
    s3.put_object(Bucket=bucket, Key=object_key, Body=b"evidence")
    got = s3.get_object(Bucket=bucket, Key=object_key)
    assert got["Body"].read() == b"evidence"


def test_s3_if_none_match_refuses_to_overwrite(
    s3: S3Client, env: dict[str, str], object_key: str
) -> None:
    bucket = env["GAPLESS_EVIDENCE_BUCKET"]
    s3.put_object(Bucket=bucket, Key=object_key, Body=b"first", IfNoneMatch="*")

    with pytest.raises(ClientError) as refused:
        s3.put_object(Bucket=bucket, Key=object_key, Body=b"second", IfNoneMatch="*")

    assert refused.value.response["Error"]["Code"] == "PreconditionFailed"
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    got = s3.get_object(Bucket=bucket, Key=object_key)
    assert got["Body"].read() == b"first"


def test_both_buckets_exist(s3: S3Client, env: dict[str, str]) -> None:
    for variable in ("GAPLESS_EVIDENCE_BUCKET", "GAPLESS_EXPORTS_BUCKET"):
        s3.head_bucket(Bucket=env[variable])


def test_up_twice_leaves_running_services_alone(env: dict[str, str]) -> None:
    before = status()
    messages: list[str] = []

    up(messages.append)

    after = status()
    assert [s.name for s in after] == ["postgres", "kafka", "s3", "registry"]
    assert all(s.running for s in after), after
    assert [s.pid for s in after] == [s.pid for s in before]
    assert not any("starting" in message for message in messages), messages
    assert local_environment() == env


def test_status_reports_the_registrys_start_up_time_and_memory(env: dict[str, str]) -> None:
    (found,) = [s for s in status() if s.name == "registry"]
    assert found.running and found.pid is not None
    assert found.startup_s is not None, "started before this was measured: gapless down && up"
    assert 0 < found.startup_s < 120  # the launcher's ready timeout
    assert found.rss_mb is not None and found.rss_mb > 50  # a JVM
    assert f"ready in {found.startup_s:.1f} s" in found.detail
