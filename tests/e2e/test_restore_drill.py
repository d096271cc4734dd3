"""``gapless drill restore`` end to end against real PostgreSQL, Kafka and S3, with the
deployed resolver API, relay, agents and read API: a ``pg_dump -Fc`` backup taken
under load, more events reaching Kafka and the projections (some left in Kafka by a
lagging consumer), the backup restored in place, the fence procedure run (pause,
epoch, fence, rebuild, resume). The drill's own checks read the real databases; this
test holds each of them, and that nothing of the sandbox is left behind. The events
are framed through the schema registry, as ``gapless up`` configures it. Timings are
reported, never judged here."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psycopg
import pytest

from db.settings import DatabaseSettings


def _sandboxes(settings: DatabaseSettings) -> list[str]:
    with psycopg.connect(settings.resolver_owner_dsn) as conn:
        rows = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE 'gapless\\_bench\\_%'"
        ).fetchall()
    return sorted(r[0] for r in rows)


@pytest.mark.slow
def test_the_restore_drill_fences_rebuilds_resumes_and_loses_nothing_it_kept(
    db_settings: DatabaseSettings, registry_url: str
) -> None:
    before = _sandboxes(db_settings)
    done = subprocess.run(
        [sys.executable, "-m", "infra.cli", "drill", "restore", "--json"],
        # Through the schema registry, as `gapless up` configures it.
        env=dict(os.environ, GAPLESS_SCHEMA_REGISTRY_URL=registry_url),
        capture_output=True,
        timeout=600,
        check=False,
    )
    stderr = done.stderr.decode(errors="replace")
    lines = done.stdout.decode().strip().splitlines()
    assert lines, stderr[-4000:]
    report = json.loads(lines[-1])
    assert done.returncode == 0 and report["drill_ok"], (
        f"failures: {report['failures']}\nmismatches: {report['mismatches'][:20]}\n"
        f"report: {report}\nstderr: {stderr[-4000:]}"
    )
    # Each check the drill made, held here too.
    assert report["failures"] == []
    assert report["old_epoch_applied"] == 0
    assert report["old_epoch_deliveries"] == report["old_epoch_in_kafka"] > 0
    assert report["old_epoch_unjudged"] == 0
    assert report["events_lost_to_restore"] > 0  # the backup's RPO, measured
    assert report["position_before_restore"] > report["backup_position"] > 0
    assert report["new_epoch"] == 2 and report["new_epoch_first_position"] == 1
    assert report["new_epoch_positions"] > 0
    assert report["rows_compared"] > 0 and report["mismatched_rows"] == 0
    assert report["writes_refused_while_paused"] == "STREAM_PAUSED"
    assert report["reads_refused_while_paused"] == "STREAM_BEING_RESTORED"
    assert {"resolver-api", "relay", "read-api"} <= set(report["paused_by"])
    for name in ("pause", "restore", "fence", "rebuild", "resume", "recovery"):
        assert report[f"drill_{name}_s"] > 0, name
    assert report["drill_recovery_s"] >= report["drill_rebuild_s"]
    # Two agents workers, and the operator's own checks: reporting and pruning resumed.
    assert report["drill_agents_workers"] == 2
    assert report["drill_events"] >= 300
    assert report["drill_reporting_resumed"] is True
    assert report["new_epoch_reported"] == report["new_epoch_positions"]
    assert report["drill_pruned_after_fence"] is True and report["new_epoch_pruned"] > 0
    assert "loadavg_end" in report["environment"]
    assert _sandboxes(db_settings) == before
