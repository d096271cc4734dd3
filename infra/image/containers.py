"""``gapless`` commands as containers of the image, as users deploy them: the same
``Deployed`` interface the demo and the tests drive (start, health, kill, stop), run
by ``podman run --network host`` so they reach the local services on loopback.

The container gets the ``GAPLESS_*`` variables of its environment (except the local
launchers' own ``GAPLESS_LOCAL_*``), passed by name (``-e NAME``) so no value (a
token, a key) shows on a command line. Each start is a new container with a name
and hostname of its own (the worker and the sweeper name themselves after the host,
and every one of them is PID 1). ``stop`` is ``podman stop``: SIGTERM to the
process, which drains and exits 0; ``kill`` is ``podman kill -s KILL``.
"""

from __future__ import annotations

import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from infra.image.podman import environment
from infra.local.layout import Layout
from infra.processes import STOP_TIMEOUT_S, Deployed, Launch

PASSED_PREFIX = "GAPLESS_"
HOST_ONLY_PREFIX = "GAPLESS_LOCAL_"
HEADER = "=== container "


@dataclass
class Contained(Deployed):
    """One ``gapless`` command as a container of ``image``."""

    image: str = ""
    layout: Layout | None = None
    container: str = field(default="", init=False)
    exit_codes: list[int] = field(default_factory=list, init=False)
    """The exit code of every container this one ran, in order (137: killed)."""
    _reaped: object = field(default=None, init=False, repr=False)

    def command(self) -> tuple[list[str], dict[str, str]]:
        assert self.layout is not None and self.image, "Contained needs an image and a layout"
        passed = sorted(
            name
            for name in self.env
            if name.startswith(PASSED_PREFIX) and not name.startswith(HOST_ONLY_PREFIX)
        )
        command = [
            "podman",
            "run",
            "--rm",
            "--name",
            self.container,
            "--hostname",
            self.container,
            "--network",
            "host",
            "--stop-timeout",
            str(int(STOP_TIMEOUT_S)),
            *(arg for name in passed for arg in ("--env", name)),
            self.image,
            *self.args,
        ]
        return command, {**environment(self.layout), **{n: self.env[n] for n in passed}}

    def start(self) -> None:
        self.container = f"gapless-{self.name}-{uuid.uuid4().hex[:8]}"
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("a") as handle:  # then podman run appends the container's output
            handle.write(f"{HEADER}{self.container}\n")
        super().start()

    def output(self) -> str:
        """What the latest container wrote (its log since it started)."""
        text = self.log.read_text(errors="replace")
        return text.rpartition(f"{HEADER}{self.container}\n")[2]

    def kill(self) -> None:
        """SIGKILL to the container's process: a crash."""
        if self.alive():
            self._podman("kill", "--signal", "KILL", self.container)
        self._reap()

    def stop(self) -> None:
        """SIGTERM to the container's process (PID 1), SIGKILL after the grace period."""
        if self.alive():
            self._podman("stop", "--time", str(int(STOP_TIMEOUT_S)), self.container)
        self._reap()

    def _reap(self) -> None:
        """Record how the latest container ended, once, also when it ended before it
        was told to (so an unexpected exit shows among ``exit_codes``)."""
        if self.popen is None or self.popen is self._reaped:
            return
        self.exit_codes.append(self.popen.wait(timeout=STOP_TIMEOUT_S + 30))
        self._reaped = self.popen

    def _podman(self, *args: str) -> None:
        assert self.layout is not None
        subprocess.run(
            ["podman", *args],
            env=environment(self.layout),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
            timeout=STOP_TIMEOUT_S + 30,
        )


def launcher(image: str, layout: Layout, started: list[Contained] | None = None) -> Launch:
    """A ``Launch`` for the demo: each process a ``Contained`` of ``image``; every one
    made is appended to ``started`` (for a test to inspect)."""

    def launch(name: str, args: list[str], env: dict[str, str], log: Path) -> Deployed:
        process = Contained(name, args, env, log, image=image, layout=layout)
        if started is not None:
            started.append(process)
        return process

    return launch
