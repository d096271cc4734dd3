"""``gapless bench rebuild`` end to end at a tiny size, against real PostgreSQL, Kafka
and S3: the deployed resolver API, relay and agents rebuild a seeded catalog under a
live write load, the rebuilt generation is checked against the accepted state, and
``--json`` prints one object with every figure, each of a sane value (never a
timing assertion: speed is what the bench reports, not what a test judges)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psycopg

from db.settings import DatabaseSettings

ITEMS = 500


def _bench_databases(settings: DatabaseSettings) -> list[str]:
    with psycopg.connect(settings.resolver_owner_dsn) as conn:
        rows = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE 'gapless\\_bench\\_%'"
        ).fetchall()
    return sorted(r[0] for r in rows)


def test_the_rebuild_bench_reports_every_figure_and_leaves_nothing_behind(
    db_settings: DatabaseSettings,
) -> None:
    before = _bench_databases(db_settings)
    done = subprocess.run(
        [sys.executable, "-m", "infra.cli", "bench", "rebuild", "--items", str(ITEMS), "--json"],
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

    assert d["rebuild_items"] == ITEMS
    # The export is taken at the cursor when it opens: the seeded items and what the
    # live writer added by then.
    assert d["rebuild_rows_loaded"] >= ITEMS
    assert d["rebuild_rows_checked"] >= d["rebuild_rows_loaded"]
    assert d["rebuild_attempts"] == 1
    for phase in ("export", "load", "catchup"):
        assert d[f"rebuild_{phase}_s"] > 0
    assert d["rebuild_rto_s"] >= d["rebuild_export_s"] + d["rebuild_load_s"]
    assert d["rebuild_rto_s"] >= d["rebuild_catchup_s"]
    assert 0 < d["rebuild_export_write_s"] <= d["rebuild_rto_s"]
    assert d["rebuild_cutover_pause_ms"] > 0
    assert d["rebuild_live_events"] > 0 and d["rebuild_catchup_events"] >= 0
    assert d["rebuild_load_eps"] > 0 and d["rebuild_bare_copy_eps"] > 0
    assert d["rebuild_load_ratio"] == round(d["rebuild_load_eps"] / d["rebuild_bare_copy_eps"], 3)
    # The same rows (items and their documents) take longer to COPY than the items alone.
    assert d["rebuild_bare_copy_items_only_eps"] > d["rebuild_bare_copy_eps"]
    assert d["rebuild_load_ratio_items_only"] < d["rebuild_load_ratio"]
    for process in ("api", "agents"):
        assert d[f"rebuild_{process}_rss_before_mb"] > 20
        assert d[f"rebuild_{process}_peak_rss_mb"] >= d[f"rebuild_{process}_rss_before_mb"]
    assert d["rebuild_peak_rss_mb"] == max(
        d["rebuild_api_peak_rss_mb"], d["rebuild_agents_peak_rss_mb"]
    )
    assert len(d["loadavg_start"]) == len(d["loadavg_end"]) == 3
    assert 0 < d["cpu_busy_pct"] <= 100 and 0 <= d["cpu_steal_pct"] < 100
    assert d["codec_reference_us"] > 0
    assert d["cores"] == os.cpu_count()
    assert "comparing generation" in stderr
    assert _bench_databases(db_settings) == before
