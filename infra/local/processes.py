"""Running tools, launching daemons and stopping them again by pid file.

A pid file alone is not proof: after a reboot the number may belong to another
program. `alive()` therefore also checks the process's command line for a marker
(`kafka.Kafka`, `versitygw`), so `down` never signals a stranger.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from infra.local.errors import ServiceError


def require_tool(name: str, hint: str) -> str:
    """The absolute path of executable `name`, or a ServiceError carrying `hint`."""
    found = shutil.which(name)
    if found is None:
        raise ServiceError(f"`{name}` is not installed or not on PATH", hint)
    return found


def run(
    command: Sequence[str],
    *,
    what: str,
    hint: str,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 600,
) -> str:
    """Run `command` to completion and return its stdout.

    A non-zero exit becomes a ServiceError quoting the end of the output, since
    that is where tools put the reason.
    """
    try:
        done = subprocess.run(
            list(command),
            cwd=cwd,
            env=None if env is None else dict(env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError as exc:
        raise ServiceError(f"{what}: {command[0]} not found", hint) from exc
    except subprocess.TimeoutExpired as exc:
        raise ServiceError(f"{what}: still running after {timeout:.0f}s", hint) from exc
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip().splitlines()
        tail = "\n    ".join(output[-15:])
        raise ServiceError(f"{what} failed (exit {done.returncode}):\n    {tail}", hint)
    return done.stdout


def spawn(
    command: Sequence[str],
    *,
    log: Path,
    pid_file: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start `command` detached from this process and record its pid.

    A new session keeps the daemon alive after the CLI exits and out of the
    terminal's Ctrl-C; its stdout and stderr are appended to `log`. Callers
    watch the returned Popen (`poll()`) while waiting for readiness rather than
    `alive()`: right after exec the kernel may not yet show the new command
    line, and `alive()` would report a healthy daemon as gone.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as sink:
        process = subprocess.Popen(
            list(command),
            cwd=cwd,
            env=None if env is None else dict(env),
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    write_pid(pid_file, process.pid)
    return process


def write_pid(pid_file: Path, pid: int) -> None:
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.write_text(f"{pid}\n")


def read_pid(pid_file: Path) -> int | None:
    """The pid recorded in `pid_file`, or None if it is missing or unreadable."""
    try:
        return int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _reap(pid: int) -> None:
    # A daemon spawned by this very process (e.g. inside pytest) lingers as a
    # zombie after it exits until we collect it; elsewhere this is a no-op.
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def alive(pid: int, marker: str) -> bool:
    """True if `pid` runs and its command line contains `marker`."""
    _reap(pid)
    proc = Path(f"/proc/{pid}")
    try:
        state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except (OSError, IndexError):
        return False
    return state != "Z" and marker in cmdline


def terminate(pid: int, marker: str, *, grace: float) -> None:
    """SIGTERM `pid` (only if it still matches `marker`), SIGKILL after `grace` seconds."""
    if not alive(pid, marker):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if wait_until(lambda: not alive(pid, marker), timeout=grace):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not alive(pid, marker), timeout=10)


def port_open(host: str, port: int) -> bool:
    """True if something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def wait_until(check: Callable[[], bool], *, timeout: float, interval: float = 0.5) -> bool:
    """Poll `check` until it returns True (-> True) or `timeout` seconds pass (-> False)."""
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def log_tail(log: Path, lines: int = 15) -> str:
    """The last `lines` lines of `log`, indented for an error message."""
    try:
        text = log.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return "    (no log written)"
    return "\n".join(f"    {line}" for line in text)
