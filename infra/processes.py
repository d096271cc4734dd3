"""``gapless`` commands run as processes of their own, as users deploy them: the
demo, the bench and the end-to-end tests start, health-check, crash and stop them
through one class.

Ports for them come from ``free_port``: below the ephemeral range (32768 and up is
where the kernel picks the local ends of outgoing connections, so a port found free
there can be taken before the process binds it).
"""

from __future__ import annotations

import contextlib
import http.client
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

STOP_TIMEOUT_S = 30.0
PORTS = (20_000, 32_000)


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port(start: int | None = None) -> int:
    """A loopback port nothing listens on now: the first at or above ``start``, or a
    random one in 20000-32000. One taken meanwhile fails its process's start loudly."""
    if start is not None:
        for port in range(start, min(start + 200, 65536)):
            if _bindable(port):
                return port
        raise RuntimeError(f"no free loopback port in {start}..{start + 199}")
    for _ in range(200):
        port = random.randint(*PORTS)
        if _bindable(port):
            return port
    raise RuntimeError(f"no free loopback port in {PORTS[0]}-{PORTS[1]}")


@dataclass
class Deployed:
    """One ``gapless`` command as its own process (``python -m infra.cli ARGS``) with
    the whole environment ``env``, its output appended to ``log``, and optionally the
    URL that answers 200 once it is ready and a working directory of its own."""

    name: str
    args: list[str]
    env: dict[str, str]
    log: Path
    health_url: str | None = None
    cwd: Path | None = None
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        assert self.popen is not None, f"{self.name} was not started"
        return self.popen.pid

    def command(self) -> tuple[list[str], dict[str, str]]:
        """What ``start`` runs, and with which environment."""
        return [sys.executable, "-m", "infra.cli", *self.args], self.env

    def start(self) -> None:
        command, env = self.command()
        with self.log.open("ab") as handle:
            self.popen = subprocess.Popen(
                command,
                stdout=handle,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.cwd,
                start_new_session=True,
            )

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def require_alive(self) -> None:
        if not self.alive():
            code = self.popen.returncode if self.popen else None
            raise RuntimeError(f"{self.name} exited ({code}); see {self.log}")

    def health(self) -> int | None:
        """The status ``health_url`` answers now; None when nothing answers."""
        assert self.health_url is not None, f"{self.name} has no health URL"
        try:
            with urllib.request.urlopen(self.health_url, timeout=3) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except (urllib.error.URLError, OSError):
            return None

    def wait_ready(self, timeout: float) -> None:
        """Until ``health_url`` answers 200 (the process must stay alive meanwhile)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.require_alive()
            if self.health() == 200:
                return
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} did not answer {self.health_url} within {timeout:.0f}s")

    def kill(self) -> None:
        """SIGKILL: a crash, with no chance to finish anything."""
        if self.alive():
            assert self.popen is not None
            self.popen.kill()
            self.popen.wait()

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

    def tail(self, lines: int = 30) -> str:
        """The last lines of its output, headed by its name."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return f"--- {self.name} ---\n" + "\n".join(text.splitlines()[-lines:])


Launch = Callable[[str, list[str], dict[str, str], Path], Deployed]
"""Makes a process from (name, args, env, log): ``Deployed`` itself runs it on this
host; ``infra.image.containers.launcher`` as a container of the image."""


def gauge(url: str | None, metric: str) -> float:
    """One unlabelled gauge from a process's /metrics (0 when it does not answer)."""
    if url is None:
        return 0.0
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            text = response.read().decode()
    except (OSError, http.client.HTTPException):
        return 0.0
    for line in text.splitlines():
        if line.startswith(metric + " "):
            with contextlib.suppress(ValueError):
                return float(line.split()[1])
    return 0.0
