"""``gapless evidence …``, ``gapless status`` and the sweeper loop against the real
services."""

from __future__ import annotations

import json
import threading
import urllib.request

import pytest
from click.testing import CliRunner

from infra.cli.main import main
from infra.processes import free_port
from producers.capture.evidence import EvidenceStore
from producers.capture.evidence_retention.service import run
from producers.capture.evidence_retention.settings import EvidenceSweepSettings
from producers.capture.evidence_retention.sweep import SweepReport
from tests.integration.producers.capture.evidence_retention.conftest import Captures


@pytest.fixture()
def env(monkeypatch: pytest.MonkeyPatch, sweep_settings: EvidenceSweepSettings) -> None:
    monkeypatch.setenv("GAPLESS_EVIDENCE_BUCKET", sweep_settings.evidence_bucket)
    monkeypatch.setenv("GAPLESS_EVIDENCE_RETENTION_SECONDS", "3600")


def test_sweep_json_dry_run_then_sweep_missing_and_status(
    env: None, captures: Captures, store: EvidenceStore
) -> None:
    old = captures.make(b'{"items": ["old"]}')
    lost = captures.make(b'{"items": ["lost"]}')
    captures.cite(lost)
    store.delete(lost.evidence_key)
    runner = CliRunner()

    dry = runner.invoke(main, ["evidence", "sweep", "--dry-run", "--json"])
    assert dry.exit_code == 1, dry.output  # an artifact is missing
    report = json.loads(dry.stdout)
    assert report["dry_run"] is True
    assert [c["capture_id"] for c in report["captures"]] == [str(old.capture_id)]
    assert captures.deletions() == []

    done = runner.invoke(main, ["evidence", "sweep"])
    assert done.exit_code == 1, done.output
    assert f"capture t1/{old.capture_id} deleted" in done.stdout
    assert f"MISSING {lost.evidence_key}" in done.stdout

    listed = runner.invoke(main, ["evidence", "missing", "--json"])
    assert [json.loads(line)["capture_id"] for line in listed.stdout.splitlines()] == [
        str(lost.capture_id)
    ]
    audit = runner.invoke(main, ["evidence", "deletions", "--json"])
    assert [json.loads(line)["kind"] for line in audit.stdout.splitlines()] == [
        "capture",
        "object",
    ]
    status = runner.invoke(main, ["status", "--json"])
    assert json.loads(status.stdout)["evidence_missing"] == 1
    table = runner.invoke(main, ["status"])
    assert "1 evidence artifacts referenced but missing" in table.stdout


def test_pin_keeps_a_capture_and_unpin_lets_it_go(env: None, captures: Captures) -> None:
    built = captures.make(b'{"items": ["pinned"]}')
    runner = CliRunner()
    pin = ["evidence", "pin", "--tenant", "t1", "--fixture", "lamp", "--reason", "golden"]
    assert runner.invoke(main, [*pin, str(built.capture_id)]).exit_code == 0
    kept = json.loads(runner.invoke(main, ["evidence", "sweep", "--json"]).stdout)
    assert kept["captures"] == [] and kept["kept"] == {"regression fixture": 1}
    unpin = ["evidence", "unpin", "--tenant", "t1", "--fixture", "lamp", str(built.capture_id)]
    assert runner.invoke(main, unpin).exit_code == 0
    gone = json.loads(runner.invoke(main, ["evidence", "sweep", "--json"]).stdout)
    assert [c["capture_id"] for c in gone["captures"]] == [str(built.capture_id)]


def test_the_loop_sweeps_on_its_schedule_and_serves_metrics(
    captures: Captures, sweep_settings: EvidenceSweepSettings, store: EvidenceStore
) -> None:
    lost = captures.make(b'{"items": ["lost"]}')
    captures.cite(lost)
    store.delete(lost.evidence_key)
    old = captures.make(b'{"items": ["old"]}')
    port = free_port()
    settings = sweep_settings.model_copy(
        update={"evidence_sweep_interval_seconds": 0.2, "evidence_sweep_http_port": port}
    )
    stop = threading.Event()
    passes: list[SweepReport] = []
    second = threading.Event()

    def on_pass(report: SweepReport) -> None:
        passes.append(report)
        if len(passes) >= 2:
            second.set()

    loop = threading.Thread(target=run, args=(settings, on_pass, stop))
    loop.start()
    try:
        assert second.wait(30), "the loop ran fewer than two passes"
        assert [c.capture_id for c in passes[0].captures] == [old.capture_id]
        assert passes[1].captures == []
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            metrics = r.read().decode()
        assert "gapless_evidence_missing_artifacts 1.0" in metrics
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            assert r.status == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
            assert r.status == 200  # two passes done
    finally:
        stop.set()
        loop.join(30)
