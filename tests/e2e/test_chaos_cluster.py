"""The fault campaign on a three-node Kafka cluster, as CI runs it: ``gapless chaos
--cluster``, whose broker faults are SIGKILLs of the node leading most of the events
topic's partitions, down past the controllers' fencing so leadership moves, then
started again; with other faults of the campaign (kills, also in narrow windows,
PostgreSQL restarts, an object-store outage, a connection drop through the proxy on
PostgreSQL or the object store), a rebuild and an epoch fence. Then nothing lost, nothing
doubled, every projection row equal to the accepted state, progress never backwards.

Smaller than ``test_chaos.py``'s scaled-out run (one of each process, fewer kills,
fewer faults of the other kinds: no registry outage or restart, a proxy drop and no
stall): the cluster's three JVMs share the machine's two cores with everything else,
and the suite's time is bounded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from infra.local.layout import current_layout

pytestmark = pytest.mark.slow

SEED = int(os.environ.get("GAPLESS_CHAOS_SEED", "20261207"))
KILLS = 24
SECONDS = 45
TIMEOUT_S = 1200.0


def test_the_pipeline_keeps_every_guarantee_while_cluster_leaders_die() -> None:
    log = current_layout().logs / "test-chaos-cluster.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable, "-m", "infra.cli", "chaos", "--cluster",
        "--kills", str(KILLS), "--seconds", str(SECONDS), "--seed", str(SEED),
        # The other kinds are test_chaos.py's business (a registry restart and a
        # proxy stall among them); one of each other kind here keeps the run short:
        # its service faults come one after another, each healed before the next.
        "--pg-restarts", "2", "--s3-outages", "1", "--registry-outages", "0",
        "--registry-restarts", "0", "--proxy-faults", "1", "--json",
    ]  # fmt: skip
    began = time.monotonic()
    with log.open("w") as progress:
        done = subprocess.run(
            command, stdout=subprocess.PIPE, stderr=progress, text=True, timeout=TIMEOUT_S
        )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no JSON after {time.monotonic() - began:.0f}s; progress in {log}"
    log.with_suffix(".json").write_text(lines[-1] + "\n")
    report = json.loads(lines[-1])
    where = f"progress in {log}; violations {report.get('violations')}"

    assert report["seed"] == SEED and report["kafka_nodes"] == 3
    faults = report["faults"]
    assert faults.get("leader_kill") == 3 and "broker_kill" not in faults, faults
    assert report["broker_restarts"] == 3
    assert report["kills"] >= KILLS // 2, where
    assert report["events_committed"] > 1000, where

    assert report["lost"] == 0, where
    assert report["doubled"] == 0, where
    assert report["mismatched_rows"] == 0, where
    assert report["progress_regressions"] == 0, where
    assert report["stuck_jobs"] == 0, where
    assert report["unexpected_quarantine"] == 0, where
    assert report["converged_s"] is not None, where
    assert report["violations"] == [], where
    assert done.returncode == 0, where
