"""The campaign's processes: the deployed relay(s), agents worker(s), capture
worker(s) and resolver API, each a ``gapless`` command of its own.

Each runs through ``infra.chaos.crashpoints`` (so an incarnation can be armed to die
in a narrow window) with the private services' environment. The fleet keeps, per
process, how it ended each time: killed by the campaign, died at its armed crash
point or at a point of the shared ledger (``crashpoints.Ledger``: the ledger names the
point by the incarnation's pid), or exited on its own (a violation: nothing should
end a process but the campaign). The campaign restarts only what it killed or armed.
"""

from __future__ import annotations

import contextlib
import http.client
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from infra.chaos.crashpoints import CRASH_EXIT, PASSES_VARIABLE, POINT_VARIABLE, Ledger
from infra.chaos.schedule import Armed, kind_of
from infra.processes import Deployed

Echo = Callable[[str], None]

START_TIMEOUT_S = 120.0
ARMED_GRACE_S = 10.0
MIN_UP_S = 1.5
PROBE_EVERY_S = 0.5
"""How often a process not yet ready is asked (``Fleet.probe``)."""
SCRAPE_TIMEOUT_S = 2.0
"""How long one /metrics answer is waited for by default (an agents worker's also
reads the product database: ``processors.agents.metrics``)."""


class ChaosProcess(Deployed):
    """A ``Deployed`` run through the crash-point entry, armed or not."""

    armed: Armed | None = None

    def command(self) -> tuple[list[str], dict[str, str]]:
        env = {k: v for k, v in self.env.items() if k not in (POINT_VARIABLE, PASSES_VARIABLE)}
        if self.armed is not None:
            env[POINT_VARIABLE] = self.armed.point
            env[PASSES_VARIABLE] = str(self.armed.passes)
        return [sys.executable, "-m", "infra.chaos.crashpoints", *self.args], env


@dataclass
class Exit:
    process: str
    code: int | None
    how: str
    """``killed`` (SIGKILL from the campaign), ``crash_point:<point>`` (died where it
    was armed to) or ``on_its_own``."""
    at: float


@dataclass
class Member:
    process: ChaosProcess
    metrics_url: str | None
    incarnations: int = 0
    started: float = 0.0
    ready_since: float | None = None
    """When this incarnation first answered its health check."""
    probed: float = 0.0
    killing: bool = False
    reported: object | None = None
    """The ``Popen`` whose exit on its own was recorded already."""
    scraped: dict[str, float] = field(default_factory=dict)
    """The last figures scraped from this incarnation's /metrics."""
    totals: dict[str, float] = field(default_factory=dict)
    """The figures of the incarnations before this one, summed."""


class Fleet:
    def __init__(self, echo: Echo, ledger: Ledger | None = None) -> None:
        self._echo = echo
        self.ledger = ledger
        """Where processes armed once (``crashpoints.ONCE_VARIABLE``) record their deaths."""
        self.pids: dict[int, str] = {}
        """Every incarnation's pid, and the process it was."""
        self.members: dict[str, Member] = {}
        self.exits: list[Exit] = []
        self.start_times: dict[str, list[float]] = {}
        """Per kind, the seconds each restart took to its first healthy answer."""
        self._lock = threading.Lock()

    def add(
        self, name: str, args: list[str], env: dict[str, str], log: Path, port: int
    ) -> ChaosProcess:
        process = ChaosProcess(name, args, env, log, f"http://127.0.0.1:{port}/healthz")
        self.members[name] = Member(process, f"http://127.0.0.1:{port}/metrics")
        return process

    def names(self, kind: str | None = None) -> list[str]:
        return sorted(n for n in self.members if kind is None or kind_of(n) == kind)

    def start_all(self) -> None:
        for member in self.members.values():
            self._start(member, None)
        for member in self.members.values():
            member.process.wait_ready(START_TIMEOUT_S)

    def _start(self, member: Member, armed: Armed | None) -> None:
        member.process.armed = armed
        member.process.start()
        self.pids[member.process.pid] = member.process.name
        member.incarnations += 1
        member.started = time.monotonic()
        member.ready_since = None

    def killable(self, name: str) -> bool:
        """Whether ``name`` may be killed now: it has answered its health check for
        ``MIN_UP_S`` (killing a process that is still starting only tests its start,
        again and again, and kills overdue on a slow machine would otherwise land the
        moment it is up), and an armed incarnation has had ``ARMED_GRACE_S`` to reach
        its crash point once up."""
        member = self.members[name]
        if not member.process.alive():
            return False
        now = time.monotonic()
        if member.ready_since is None and not self._ready(member, now):
            return False
        assert member.ready_since is not None
        if now - member.ready_since < MIN_UP_S:
            return False
        return member.process.armed is None or now - member.ready_since >= ARMED_GRACE_S

    def _ready(self, member: Member, now: float) -> bool:
        """Ask a restarted incarnation whether it is up; the first yes is its
        ``ready_since`` and one sample of its kind's start time."""
        member.probed = now
        if member.process.health() != 200:
            return False
        member.ready_since = now
        if member.incarnations > 1:
            kind = kind_of(member.process.name)
            self.start_times.setdefault(kind, []).append(round(now - member.started, 2))
        return True

    def probe(self) -> None:
        """Ask each incarnation not yet seen up, at most every ``PROBE_EVERY_S``."""
        now = time.monotonic()
        for member in self.members.values():
            if (
                member.ready_since is None
                and now - member.probed >= PROBE_EVERY_S
                and member.process.alive()
            ):
                self._ready(member, now)

    def kill(self, name: str, then_arm: Armed | None) -> bool:
        """SIGKILL ``name`` and start it again at once (armed with ``then_arm``);
        False when it was not running (it already died: the watcher saw it)."""
        member = self.members[name]
        with self._lock:
            if not member.process.alive():
                return False
            member.killing = True
            member.process.kill()
            self.exits.append(Exit(name, -9, "killed", time.monotonic()))
            self._bank(member)
            member.killing = False
            self._start(member, then_arm)
        return True

    def watch(self) -> list[Exit]:
        """Exits the campaign did not cause, since the last call: an armed process that
        died at its point is restarted (unarmed; an agents worker stays armed with the
        rebuild lane's points, which its environment carries); any other stays down,
        recorded."""
        found = []
        with self._lock:
            for name, member in self.members.items():
                p = member.process
                if member.killing or p.popen is None or p.alive():
                    continue
                code = p.popen.returncode
                if member.reported is p.popen:
                    continue
                point = self._crash_point(p) if code == CRASH_EXIT else None
                if point is not None:
                    exit_ = Exit(name, code, f"crash_point:{point}", time.monotonic())
                    self.exits.append(exit_)
                    found.append(exit_)
                    self._bank(member)
                    self._start(member, None)
                    continue
                exit_ = Exit(name, code, "on_its_own", time.monotonic())
                self.exits.append(exit_)
                found.append(exit_)
                member.reported = p.popen
        return found

    def _crash_point(self, process: ChaosProcess) -> str | None:
        """Where the incarnation that exited with ``CRASH_EXIT`` died: the ledger's
        point naming its pid, else the point it was armed with."""
        if self.ledger is not None and process.popen is not None:
            point = self.ledger.point_of(process.popen.pid)
            if point is not None:
                return point
        return process.armed.point if process.armed is not None else None

    def scrape(
        self,
        names: tuple[str, ...],
        only: set[str] | None = None,
        timeout: float = SCRAPE_TIMEOUT_S,
    ) -> set[str]:
        """Read each running process's counters named in ``names`` (a SIGKILL loses
        what happened since the last scrape: the per-instance figures are a floor), of
        every member or of those in ``only``. Returns the members that answered: one
        that did not keeps its previous figures, which are then no measure of what it
        did since."""
        answered = set()
        for name, member in self.members.items():
            if only is not None and name not in only:
                continue
            if member.metrics_url is None or not member.process.alive():
                continue
            found = _counters(member.metrics_url, names, timeout)
            if found is not None:
                member.scraped = found
                answered.add(name)
        return answered

    def _bank(self, member: Member) -> None:
        for key, value in member.scraped.items():
            member.totals[key] = member.totals.get(key, 0.0) + value
        member.scraped = {}

    def work(self, name: str) -> dict[str, float]:
        """The counters of every incarnation of ``name`` so far."""
        member = self.members[name]
        keys = member.totals.keys() | member.scraped.keys()
        return {k: member.totals.get(k, 0.0) + member.scraped.get(k, 0.0) for k in keys}

    def all_alive(self) -> bool:
        return all(m.process.alive() for m in self.members.values())

    def stop_all(self) -> None:
        for member in reversed(list(self.members.values())):
            member.process.stop()


def _counters(url: str, names: tuple[str, ...], timeout: float) -> dict[str, float] | None:
    """Sums of the Prometheus samples of ``names`` (over their labels), or None when
    the process does not answer."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            text = response.read().decode()
    except (OSError, http.client.HTTPException):  # down, slow, or killed while answering
        return None
    found = dict.fromkeys(names, 0.0)
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        metric, _, value = line.rpartition(" ")
        base = metric.split("{", 1)[0]
        if base in found:
            with contextlib.suppress(ValueError):
                found[base] += float(value)
    return found
