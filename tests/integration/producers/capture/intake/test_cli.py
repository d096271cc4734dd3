"""``gapless collectors``, ``gapless collector-token`` and ``gapless sweep-jobs``."""

from __future__ import annotations

import json

import psycopg
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from pydantic import SecretStr

from db.settings import DatabaseSettings
from infra.cli.main import main
from infra.local.services import local_environment
from producers.api import create_app

from .conftest import MakeSettings, capture_body, closed_port, post


def _run(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_register_rotate_revoke_and_list(clean_db: DatabaseSettings) -> None:
    _run(
        "collectors",
        "register",
        "--tenant",
        "t1",
        "--source",
        "shop",
        "--instance-id",
        "i1",
        "--client-id",
        "c1",
    )
    _run(
        "collectors",
        "register",
        "--tenant",
        "t1",
        "--source",
        "shop",
        "--instance-id",
        "i1",
        "--client-id",
        "c1",
    )  # idempotent
    clash = CliRunner().invoke(
        main,
        [
            "collectors",
            "register",
            "--tenant",
            "t2",
            "--source",
            "shop",
            "--instance-id",
            "i9",
            "--client-id",
            "c1",
        ],
    )
    assert clash.exit_code == 2 and "another instance" in clash.output
    _run("collectors", "rotate", "--client-id", "c1", "--new-client-id", "c2", "--revoke-old")
    _run(
        "collectors",
        "register",
        "--tenant",
        "t2",
        "--source",
        "shop",
        "--instance-id",
        "i1",
        "--client-id",
        "other",
    )
    listed = [json.loads(line) for line in _run("collectors", "list", "--json").splitlines()]
    assert [
        (c["client_id"], c["tenant"], c["instance_id"], c["revoked_at"] is None) for c in listed
    ] == [
        ("c1", "t1", "i1", False),
        ("c2", "t1", "i1", True),
        ("other", "t2", "i1", True),
    ]
    only_t2 = _run("collectors", "list", "--tenant", "t2")
    assert "other" in only_t2 and "c1" not in only_t2
    _run("collectors", "revoke", "--client-id", "c2")
    assert "revoked" in _run("collectors", "list", "--tenant", "t1").splitlines()[1]


def test_a_dev_token_is_accepted_by_a_locally_configured_api(
    clean_db: DatabaseSettings, make_settings: MakeSettings, topic: str
) -> None:
    env = local_environment()
    _run(
        "collectors",
        "register",
        "--tenant",
        "t1",
        "--source",
        "shop",
        "--instance-id",
        "i1",
        "--client-id",
        "dev",
    )
    token = _run("collector-token", "--client-id", "dev", "--tenant", "t1").strip()
    settings = make_settings(
        jobs_topic=topic,
        collector_jwt_public_key=env["GAPLESS_COLLECTOR_JWT_PUBLIC_KEY"],
        collector_jwt_issuer=env["GAPLESS_COLLECTOR_JWT_ISSUER"],
        collector_jwt_audience=env["GAPLESS_COLLECTOR_JWT_AUDIENCE"],
        api_tokens=SecretStr(env["GAPLESS_API_TOKENS"]),
    )
    with TestClient(create_app(settings)) as client:
        assert post(client, token, capture_body()).status_code == 201


def test_collector_token_is_refused_for_a_revoked_unknown_or_foreign_credential(
    clean_db: DatabaseSettings,
) -> None:
    _run(
        "collectors", "register", "--tenant", "t1", "--source", "shop",
        "--instance-id", "i1", "--client-id", "dev",
    )  # fmt: skip
    assert _run("collector-token", "--client-id", "dev").strip().count(".") == 2
    for args, problem in (
        (("--client-id", "nobody"), "not registered"),
        (("--client-id", "dev", "--tenant", "t2"), "claims tenant 't2'"),
    ):
        refused = CliRunner().invoke(main, ["collector-token", *args])
        assert refused.exit_code == 2 and problem in refused.output, refused.output
    _run("collectors", "revoke", "--client-id", "dev")
    refused = CliRunner().invoke(main, ["collector-token", "--client-id", "dev"])
    assert refused.exit_code == 2, refused.output
    assert "revoked" in refused.output and "gapless collectors" in refused.output
    assert "eyJ" not in refused.output


def test_sweep_jobs_once_enqueues_what_is_pending(
    clean_db: DatabaseSettings,
    make_settings: MakeSettings,
    collector: str,
    topic: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broken = make_settings(
        kafka_bootstrap=f"127.0.0.1:{closed_port()}", jobs_topic=topic, enqueue_timeout_seconds=0.5
    )
    with TestClient(create_app(broken)) as client:
        assert post(client, collector, capture_body()).status_code == 201
    with psycopg.connect(clean_db.resolver_dsn, autocommit=True) as conn:
        conn.execute("UPDATE intake_job SET next_attempt_at = now() - interval '1s'")
    monkeypatch.setenv("GAPLESS_JOBS_TOPIC", topic)
    out = json.loads(_run("sweep-jobs", "--once"))
    assert (out["claimed"], out["enqueued"], out["still_pending"]) == (1, 1, {})
