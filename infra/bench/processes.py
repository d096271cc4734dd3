"""The deployed processes (``gapless resolver-api``, ``gapless agents``, ``gapless
relay``) as subprocesses of the bench, pointed at its sandbox, and their memory.

Memory is read from ``/proc``: ``VmRSS`` now and ``VmHWM``, the peak resident set
since the process started or since the peak was last reset (writing ``5`` to
``/proc/<pid>/clear_refs``, allowed for one's own processes), summed over the
process and its descendants.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

STOP_TIMEOUT_S = 30.0


def free_port(start: int) -> int:
    """The first port at or above ``start`` that nothing listens on (loopback)."""
    for port in range(start, min(start + 200, 65536)):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in {start}..{start + 199}")


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            text = Path(f"/proc/{pid}/task/{task}/children").read_text()
        except OSError:
            continue
        found.extend(int(c) for c in text.split())
    return found


def process_tree(pid: int) -> list[int]:
    """``pid`` and every descendant alive now."""
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(_children(current))
    return tree


def _status_kb(pid: int, field_name: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field_name}:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def rss_mb(pid: int) -> float:
    """Resident memory of the process tree now, MB."""
    return sum(_status_kb(p, "VmRSS") for p in process_tree(pid)) / 1024


def peak_rss_mb(pid: int) -> float:
    """Peak resident memory of the process tree (each process's ``VmHWM``), MB."""
    return sum(_status_kb(p, "VmHWM") for p in process_tree(pid)) / 1024


def reset_peak(pid: int) -> bool:
    """Start each process's ``VmHWM`` again from its current RSS; False if refused."""
    ok = True
    for p in process_tree(pid):
        try:
            Path(f"/proc/{p}/clear_refs").write_text("5")
        except OSError:
            ok = False
    return ok


@dataclass
class Deployed:
    """One ``gapless`` command run as its own process, with its output in ``log``."""

    name: str
    args: list[str]
    env: dict[str, str]
    log: Path
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        assert self.popen is not None, f"{self.name} was not started"
        return self.popen.pid

    def start(self) -> None:
        with self.log.open("ab") as handle:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "infra.cli", *self.args],
                stdout=handle,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def require_alive(self) -> None:
        if not self.alive():
            code = self.popen.returncode if self.popen else None
            raise RuntimeError(f"{self.name} exited ({code}); see {self.log}")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it does not exit in time."""
        if not self.alive():
            return
        assert self.popen is not None
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


def wait_http_ok(process: Deployed, url: str, timeout: float) -> None:
    """Until ``url`` answers 200 (the process must stay alive meanwhile)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        process.require_alive()
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{process.name} did not answer {url} within {timeout:.0f}s")
