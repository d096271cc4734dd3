"""``gapless bench peers`` end to end at a small size, against real PostgreSQL (with
logical decoding, as ``gapless up`` starts it) and Kafka, with Kafka Connect and
Debezium fetched and started by the bench: ``--json`` prints one object with every
figure, each of a sane value (never a timing assertion), every row arrived after
each kill, and nothing of the sandbox is left: databases, replication slots,
publications, topics."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psycopg
from confluent_kafka.admin import AdminClient

from db.settings import DatabaseSettings
from schemas.settings import KafkaSettings

ROWS = 300

KEYS = (
    "relay_mps",
    "debezium_mps",
    "relay_vs_debezium",
    "relay_p99_ms",
    "debezium_p99_ms",
    "relay_kill_duplicates",
    "debezium_kill_duplicates",
    "agents_eps",
    "pyeventsourcing_eps",
    "agents_vs_pyeventsourcing",
)


def _leftovers(settings: DatabaseSettings, kafka: KafkaSettings) -> dict[str, list[str]]:
    with psycopg.connect(settings.resolver_owner_dsn, autocommit=True) as conn:
        databases = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE 'gapless\\_bench\\_%'"
        ).fetchall()
        slots = conn.execute(
            "SELECT slot_name FROM pg_replication_slots WHERE slot_name LIKE 'bench\\_%'"
        ).fetchall()
    admin = AdminClient({"bootstrap.servers": kafka.kafka_bootstrap})
    topics = [t for t in admin.list_topics(timeout=10).topics if t.startswith("bench")]
    return {
        "databases": sorted(r[0] for r in databases),
        "slots": sorted(r[0] for r in slots),
        "topics": sorted(topics),
    }


def test_the_peers_bench_reports_every_figure_and_leaves_nothing_behind(
    db_settings: DatabaseSettings, kafka_settings: KafkaSettings
) -> None:
    before = _leftovers(db_settings, kafka_settings)
    done = subprocess.run(
        [sys.executable, "-m", "infra.cli", "bench", "peers", "--rows", str(ROWS), "--json"],
        env=dict(os.environ),
        capture_output=True,
        timeout=600,
        check=False,
    )
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode == 0, stderr[-4000:]
    lines = done.stdout.decode().splitlines()
    assert len(lines) == 1, lines
    d = json.loads(lines[0])

    for key in KEYS:
        assert key in d, key
    for key in ("relay", "debezium"):
        for b in (1, 100):
            assert d[f"{key}_b{b}_mps"] > 0
            assert 0 <= d[f"{key}_b{b}_p50_ms"] <= d[f"{key}_b{b}_p99_ms"]
        # Every row arrived after the kills (the bench fails otherwise); each restart
        # re-sends at most what was out before its kill.
        out = d[f"{key}_kill_arrived_before"]
        assert len(out) == 3 and 0 < out[0] <= out[1] <= out[2] <= d["kill_rows"]
        assert 0 <= d[f"{key}_kill_duplicates"] <= sum(out)
    assert d["relay_mps"] == d["relay_b100_mps"]
    assert d["relay_p99_ms"] == d["relay_b100_p99_ms"]
    assert d["relay_vs_debezium"] == round(d["relay_mps"] / d["debezium_mps"], 3)
    assert d["agents_eps"] > 0 and d["pyeventsourcing_eps"] > 0
    assert d["agents_vs_pyeventsourcing"] == round(d["agents_eps"] / d["pyeventsourcing_eps"], 3)
    assert d["agents_2_eps"] > 0
    assert d["agents_2_vs_pyeventsourcing"] == round(
        d["agents_2_eps"] / d["pyeventsourcing_eps"], 3
    )
    assert d["rows"] == d["projection_events"] == ROWS
    assert d["kill_rows"] == d["drain_rows"] == 5 * ROWS
    assert d["connect_peak_rss_mb"] > 50
    assert len(d["loadavg_start"]) == len(d["loadavg_end"]) == 3
    assert 0 < d["cpu_busy_pct"] <= 100 and 0 <= d["cpu_steal_pct"] < 100
    assert d["codec_reference_us"] > 0
    assert d["cores"] == os.cpu_count()
    assert _leftovers(db_settings, kafka_settings) == before
