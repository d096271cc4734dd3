"""What the campaign reads from each process's /metrics, and what it makes of a
process that did not answer in time (a slow answer is no figure, never "no work")."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from infra.chaos import campaign
from infra.chaos.fleet import Fleet
from infra.chaos.schedule import Armed

METRIC = "gapless_applier_events_total"


class _Metrics(BaseHTTPRequestHandler):
    delays: ClassVar[dict[str, float]] = {}
    counts: ClassVar[dict[str, float]] = {}

    def do_GET(self) -> None:
        name = self.path.strip("/").split("/")[0]
        time.sleep(self.delays.get(name, 0.0))
        body = (
            f"# TYPE {METRIC} counter\n"
            f'{METRIC}{{outcome="applied"}} {self.counts[name]}\n'
            f'{METRIC}{{outcome="duplicate"}} 1.0\n'
        ).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    fleet = Fleet(echo=lambda _: None)
    sleepers = []
    for name in ("agents-1", "agents-2"):
        process = fleet.add(name, [], {}, tmp_path / f"{name}.log", port)
        fleet.members[name].metrics_url = f"http://127.0.0.1:{port}/{name}/metrics"
        # A live process stands for the worker: only running members are scraped.
        process.popen = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        sleepers.append(process.popen)
    _Metrics.delays = {}
    _Metrics.counts = {"agents-1": 10.0, "agents-2": 20.0}
    yield fleet
    server.shutdown()
    for popen in sleepers:
        popen.kill()
        popen.wait()


def test_a_scrape_names_who_answered_and_sums_each_metric_over_its_labels(fleet: Fleet) -> None:
    assert fleet.scrape((METRIC,)) == {"agents-1", "agents-2"}
    assert fleet.work("agents-1") == {METRIC: 11.0}
    assert fleet.work("agents-2") == {METRIC: 21.0}


def test_one_that_answers_too_late_is_not_counted_as_answered(fleet: Fleet) -> None:
    fleet.scrape((METRIC,))
    _Metrics.counts = {"agents-1": 500.0, "agents-2": 900.0}
    _Metrics.delays = {"agents-2": 1.0}
    assert fleet.scrape((METRIC,), timeout=0.2) == {"agents-1"}
    # Its figures are the old ones: read as a count, they would say it did nothing.
    assert fleet.work("agents-2") == {METRIC: 21.0}
    assert fleet.scrape((METRIC,), only={"agents-2"}, timeout=5.0) == {"agents-2"}
    assert fleet.work("agents-2") == {METRIC: 901.0}


def test_the_calm_asks_a_slow_process_again_until_it_answers(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(campaign, "CALM_SCRAPE_TIMEOUT_S", 0.3)
    _Metrics.delays = {"agents-2": 0.6}

    def faster_each_time(*args: object, **kwargs: object) -> set[str]:
        answered = scrape(*args, **kwargs)  # type: ignore[arg-type]
        _Metrics.delays = {"agents-2": max(0.0, _Metrics.delays["agents-2"] - 0.25)}
        return answered

    scrape = fleet.scrape
    monkeypatch.setattr(fleet, "scrape", faster_each_time)
    said: list[str] = []
    assert campaign._scrape_each(fleet, (METRIC,), said.append) == set()
    assert said and "agents-2" in said[0]
    assert fleet.work("agents-2") == {METRIC: 21.0}


def test_one_that_never_answers_is_named_unmeasured(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(campaign, "CALM_SCRAPE_S", 1.0)
    monkeypatch.setattr(campaign, "CALM_SCRAPE_TIMEOUT_S", 0.2)
    _Metrics.delays = {"agents-1": 3.0}
    assert campaign._scrape_each(fleet, (METRIC,), lambda _: None) == {"agents-1"}


def test_the_calm_first_restarts_an_armed_incarnation_unarmed(fleet: Fleet) -> None:
    # Armed near the faults' end, it would die at its point in the calm and stay down
    # until the next watch: unmeasured, or idle, through no fault of the code.
    armed = fleet.members["agents-1"].process
    old = armed.popen
    assert old is not None
    armed.armed = Armed("applier.committed", 1)
    untouched = fleet.members["agents-2"].process.popen
    report = campaign.Report(seed=1, scale=True)
    said: list[str] = []
    try:
        campaign._disarm(fleet, report, said.append)
        assert report.calm_disarmed == ["agents-1"]
        assert old.wait(timeout=10) == -9
        assert armed.armed is None and armed.popen is not old
        assert fleet.members["agents-1"].incarnations == 1
        assert fleet.members["agents-2"].process.popen is untouched
        assert untouched is not None and untouched.poll() is None
        assert said == ["  calm: restarted agents-1 unarmed"]
        # Nothing armed is left: a second pass restarts nothing.
        campaign._disarm(fleet, report, said.append)
        assert report.calm_disarmed == ["agents-1"]
    finally:
        if armed.popen is not None and armed.popen is not old:
            armed.popen.kill()
            armed.popen.wait()
