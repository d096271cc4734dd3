"""``gapless bench`` end to end at a tiny size against real PostgreSQL, Kafka and S3:
every phase runs (the deployed agents' backlog and the deployed capture worker among
them) and ``--json`` prints one object with every key, each of a sane value (never a
timing assertion: speed is what the bench reports, not what a test judges), and
nothing of its sandbox is left; ``gapless bench memory`` likewise."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from typing import Any

import psycopg
import pytest

from db.settings import DatabaseSettings

KEYS = (
    "writer_ratio_b1", "writer_ratio_b100", "relay_ratio", "applier_ratio", "e2e_p50_ms",
    "e2e_p99_ms", "applier_eps", "applier_bare_eps", "agents_backlog_eps", "agents_ratio",
    "agents_vs_bare", "agents_backlog_events", "agents_peak_rss_mb", "loadavg_start",
    "loadavg_end", "cores", "e2e_deployed_p50_ms_200", "e2e_deployed_p99_ms_200",
    "e2e_deployed_p99_ms_1000", "e2e_deployed_p99_ms_2000", "e2e_deployed_achieved_eps_1000",
    "e2e_deployed_max_rate_eps", "writer_bulk_b100_eps", "writer_ratio_bulk_b100",
    "writer_sql_replay_b1_eps", "writer_ratio_sql_b1", "worker_products_per_s",
    "worker_products", "worker_decisions", "worker_review_cases", "worker_unchanged",
    "worker_seconds", "e2e_deployed_relay_p99_ms_1000", "e2e_deployed_apply_p99_ms_1000",
    "cpu_busy_pct", "cpu_steal_pct", "codec_reference_us", "decision_client_cpu_us",
    "decision_backend_cpu_us", "decision_wall_us", "decision_cpu_decisions",
    "decision_locked_client_cpu_us", "decision_locked_backend_cpu_us",
    "decision_client_cpu_ratio", "decision_backend_cpu_ratio",
    "api_decisions_per_s", "api_decision_p50_ms", "api_decision_p99_ms", "api_vs_inprocess",
    "inprocess_decisions_per_s", "inprocess_decision_p99_ms", "api_clients", "api_processes",
    "api_2_processes_decisions_per_s", "api_2_processes_decision_p99_ms",
    "api_cpu_us_per_decision", "inprocess_cpu_us_per_decision", "intake_captures_per_s",
    "intake_capture_p99_ms", "intake_capture_bytes", "intake_cpu_us_per_capture",
    "worker_settle_to_applied_s", "worker_cpu_us_per_product",
)  # fmt: skip
MEMORY_KEYS = (
    "backlog_events", "relay_peak_rss_mb", "agents_peak_rss_mb", "relay_rss_10_mb",
    "relay_rss_50_mb", "relay_rss_100_mb", "agents_rss_10_mb", "agents_rss_50_mb",
    "agents_rss_100_mb", "relay_flat", "agents_flat", "relay_samples", "agents_samples",
    "loadavg_start", "loadavg_end", "cpu_busy_pct", "cpu_steal_pct", "codec_reference_us",
)  # fmt: skip


def _sandboxes(settings: DatabaseSettings) -> list[str]:
    with psycopg.connect(settings.resolver_owner_dsn) as conn:
        rows = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE 'gapless\\_bench\\_%'"
        ).fetchall()
    return sorted(r[0] for r in rows)


def _buckets() -> set[str]:
    from db.objects import s3_client
    from infra.config import load
    from schemas.settings import ObjectStoreSettings

    listed = s3_client(load(ObjectStoreSettings)).list_buckets().get("Buckets", [])
    return {b["Name"] for b in listed if "Name" in b}


def _bench(*args: str) -> tuple[dict[str, Any], str]:
    """Run ``gapless bench ARGS --json``: (its JSON object, its stderr)."""
    done = subprocess.run(
        [sys.executable, "-m", "infra.cli", "bench", *args, "--json"],
        env=dict(os.environ),
        capture_output=True,
        timeout=600,
        check=False,
    )
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode == 0, stderr[-4000:]
    return json.loads(done.stdout.decode().strip().splitlines()[-1]), stderr


def test_the_bench_reports_every_phase_the_deployed_agents_included(
    db_settings: DatabaseSettings,
) -> None:
    before, buckets = _sandboxes(db_settings), _buckets()
    d, stderr = _bench("--seconds", "1", "--backlog", "3000", "--worker-products", "100")
    assert set(KEYS) <= d.keys(), set(KEYS) - d.keys()
    assert d["agents_backlog_events"] == 3000
    assert d["agents_backlog_eps"] > 0 and d["applier_eps"] > 0
    assert d["agents_ratio"] == round(d["agents_backlog_eps"] / d["applier_eps"], 3)
    assert d["agents_vs_bare"] == round(d["agents_backlog_eps"] / d["applier_bare_eps"], 3)
    assert d["agents_peak_rss_mb"] >= d["agents_rss_before_mb"] > 20
    assert len(d["loadavg_start"]) == len(d["loadavg_end"]) == 3
    assert 0 < d["cpu_busy_pct"] <= 100 and 0 <= d["cpu_steal_pct"] < 100
    assert d["codec_reference_us"] > 0
    assert d["writer_bulk_b100_eps"] > 0 and d["writer_sql_replay_b1_eps"] > 0
    ratio = d["writer_gapless_b1_eps"] / d["writer_sql_replay_b1_eps"]
    assert d["writer_ratio_sql_b1"] == pytest.approx(ratio, abs=0.002)
    for rate in (200, 1000, 2000):
        assert 0 < d[f"e2e_deployed_p50_ms_{rate}"] <= d[f"e2e_deployed_p99_ms_{rate}"]
        assert d[f"e2e_deployed_achieved_eps_{rate}"] > 0
        # CreateTime has millisecond resolution; it can read just before the commit.
        assert d[f"e2e_deployed_relay_p99_ms_{rate}"] > -1
        assert d[f"e2e_deployed_apply_p99_ms_{rate}"] > -1
        cpu = d[f"e2e_deployed_cpu_us_per_event_{rate}"]
        busy = ("writers", "relay", "agents", "postgres", "kafka")
        assert set(busy) <= cpu.keys() and "s3" in cpu  # the S3 server: idle in this phase
        assert all(cpu[name] > 0 for name in busy) and d[f"e2e_deployed_cores_{rate}"] > 0
        # PostgreSQL's split by database: the writing and the applying side both
        # busy, the parts (each rounded) within the whole.
        assert cpu["postgres.resolver"] > 0 and cpu["postgres.product"] > 0
        parts = [
            cpu[f"postgres.{db}"]
            for db in ("resolver", "product", "control")
            if f"postgres.{db}" in cpu
        ]
        assert sum(parts) <= cpu["postgres"] + len(parts)
    assert d["e2e_deployed_max_rate_eps"] in (0, 200, 1000, 2000)
    # The local PostgreSQL's backends are this machine's processes: both are seen.
    assert d["decision_cpu_decisions"] > 0
    assert d["decision_wall_us"] > d["decision_client_cpu_us"] > 0
    assert d["decision_backend_cpu_us"] > 0
    assert d["decision_locked_client_cpu_us"] > 0 and d["decision_locked_backend_cpu_us"] > 0
    assert d["decision_client_cpu_ratio"] == pytest.approx(
        d["decision_client_cpu_us"] / d["decision_locked_client_cpu_us"], rel=0.01
    )
    assert d["worker_products"] == 100 and d["worker_products_per_s"] > 0
    # 10 known products (half changed), 90 new of which one has no GTIN.
    assert (d["worker_decisions"], d["worker_unchanged"], d["worker_review_cases"]) == (94, 5, 1)
    _check_api(d)
    assert "(e) the deployed agents" not in stderr  # the table is for --json-less runs
    assert _sandboxes(db_settings) == before
    assert _buckets() == buckets


def _check_api(d: dict[str, Any]) -> None:
    """Phase (h)'s figures: every round did requests, each process's CPU was read."""
    assert d["api_clients"] == 4 and d["api_processes"] == 1
    for rate in ("api_decisions_per_s", "inprocess_decisions_per_s", "intake_captures_per_s"):
        assert d[rate] > 0, rate
    assert d["api_2_processes_decisions_per_s"] > 0
    assert 0 < d["api_decision_p50_ms"] <= d["api_decision_p99_ms"]
    ratio = d["api_decisions_per_s"] / d["inprocess_decisions_per_s"]
    assert d["api_vs_inprocess"] == pytest.approx(ratio, abs=0.002)
    assert d["api_cpu_us_per_decision"]["api"] > 0 and d["api_cpu_us_per_decision"]["clients"] > 0
    assert d["api_cpu_us_per_decision"]["postgres"] > 0
    # In process, the API processes are idle; the clients do the work.
    assert d["inprocess_cpu_us_per_decision"]["clients"] > d["inprocess_cpu_us_per_decision"]["api"]
    assert d["intake_cpu_us_per_capture"]["s3"] > 0 and d["intake_capture_bytes"] > 1000


def test_the_memory_bench_follows_the_relay_and_the_agents_through_the_backlog(
    db_settings: DatabaseSettings,
) -> None:
    before = _sandboxes(db_settings)
    d, _stderr = _bench("memory", "--events", "4000")
    assert set(MEMORY_KEYS) <= d.keys(), set(MEMORY_KEYS) - d.keys()
    assert d["backlog_events"] == 4000
    for name in ("relay", "agents"):
        samples = d[f"{name}_samples"]
        assert samples[-1][1] == 4000  # the last sample saw the whole backlog done
        assert all(a[1] <= b[1] for a, b in itertools.pairwise(samples))
        assert d[f"{name}_peak_rss_mb"] >= d[f"{name}_rss_100_mb"] > 20
        assert isinstance(d[f"{name}_flat"], bool)
    assert _sandboxes(db_settings) == before


def test_the_api_bench_runs_the_resolver_api_phase_alone(db_settings: DatabaseSettings) -> None:
    before, buckets = _sandboxes(db_settings), _buckets()
    d, _stderr = _bench("api", "--seconds", "1")
    api_keys = [k for k in KEYS if k.startswith(("api_", "inprocess_", "intake_"))]
    assert set(api_keys) <= d.keys(), set(api_keys) - d.keys()
    _check_api(d)
    assert {"pg_round_trip_us", "cores", "loadavg_start", "codec_reference_us"} <= d.keys()
    assert "writer" not in " ".join(d) and "worker" not in " ".join(d)  # no other phase ran
    assert _sandboxes(db_settings) == before
    assert _buckets() == buckets


def test_the_worker_bench_runs_the_capture_phase_alone(db_settings: DatabaseSettings) -> None:
    before, buckets = _sandboxes(db_settings), _buckets()
    d, stderr = _bench("worker", "--products", "100")
    worker_keys = [k for k in KEYS if k.startswith("worker_")]
    assert set(worker_keys) <= d.keys(), set(worker_keys) - d.keys()
    assert d["worker_products"] == 100 and d["worker_products_per_s"] > 0
    # 10 known products (half changed), 90 new of which one has no GTIN.
    assert (d["worker_decisions"], d["worker_unchanged"], d["worker_review_cases"]) == (94, 5, 1)
    assert {"pg_round_trip_us", "cores", "loadavg_start", "codec_reference_us"} <= d.keys()
    # The worker process's resident memory over the feed, read from /proc.
    memory = [d[k] for k in ("worker_rss_before_mb", "worker_rss_10_mb", "worker_rss_90_mb")]
    assert all(30 < mb < 2000 for mb in memory), memory
    assert d["worker_peak_rss_mb"] is None or d["worker_peak_rss_mb"] >= min(memory)
    assert isinstance(d["worker_rss_flat"], bool)
    # The worker process's CPU over the feed, from /proc: some, and under a second a product.
    assert 0 < d["worker_cpu_us_per_product"] < 1e6
    # The deployed agents applied the capture's last event after its last product settled.
    assert d["worker_settle_to_applied_s"] > 0
    assert "settle: the databases vacuumed" in stderr  # the catalog analyzed after its first feed
    assert "writer" not in " ".join(d)  # no other phase ran
    assert _sandboxes(db_settings) == before
    assert _buckets() == buckets


def test_the_scale_bench_times_each_round_on_a_cluster_of_its_own(
    db_settings: DatabaseSettings,
) -> None:
    before = _sandboxes(db_settings)
    d, stderr = _bench("scale", "--events", "10000")
    for kind, counts in (("agents", (1, 2, 3)), ("relay", (1, 2))):
        for n in counts:
            assert d[f"scale_{kind}_eps_{n}"] > 0, (kind, n)
            cpu = d[f"scale_{kind}_{n}_cpu_us"]
            # Every process of the round, PostgreSQL and the three brokers did work.
            named = {f"{kind}-{i}" for i in range(1, n + 1)} | {"kafka-1", "kafka-2", "kafka-3"}
            assert named <= cpu.keys() and "postgres" in cpu, cpu
            assert sum(cpu[f"{kind}-{i}"] for i in range(1, n + 1)) > 0
            assert all(cpu[k] > 0 for k in ("kafka-1", "kafka-2", "kafka-3")), cpu
    assert {"cores", "loadavg_start", "cpu_busy_pct"} <= d.keys()
    assert "kafka-1: starting" in stderr and "kafka-3: stopping" in stderr
    assert _sandboxes(db_settings) == before
