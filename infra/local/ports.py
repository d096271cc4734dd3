"""Whether a local service's port is free, and who holds it when it is not.

A launcher checks its ports before it starts anything: it binds each one as the
service will (on 127.0.0.1, with ``SO_REUSEADDR`` as PostgreSQL, the JVM and Go set
it, so a connection lingering in TIME_WAIT is no obstacle). When the bind fails the
error names the holder, its pid and command line, found by the socket's inode in
``/proc/net/tcp``/``tcp6`` and the process whose ``/proc/PID/fd`` links to it, and
the variable that moves the port.
"""

from __future__ import annotations

import contextlib
import socket
from dataclasses import dataclass
from pathlib import Path

from infra.local.errors import ServiceError

PROC = Path("/proc")
LISTEN = "0A"
"""The TCP state ``/proc/net/tcp`` writes for a listening socket."""


class PortTaken(ServiceError):
    """A port a local service needs is held by another program."""

    code = "LOCAL_PORT_TAKEN"

    def __init__(self, port: int, service: str, variable: str, holder: str) -> None:
        super().__init__(
            f"{service}: port {port} is taken by {holder}",
            f"stop that program, or set {variable} to a free port below 32768",
        )
        self.port = port
        self.variable = variable
        self.holder = holder


@dataclass(frozen=True)
class Holder:
    pid: int
    command: str

    def __str__(self) -> str:
        return f"pid {self.pid} ({self.command})"


def bindable(host: str, port: int) -> bool:
    """True if a server could listen on host:port now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
        return True


def require_free(host: str, port: int, service: str, variable: str) -> None:
    """Raise ``PortTaken`` naming the holder and ``variable`` unless host:port is free."""
    if bindable(host, port):
        return
    found = holders(port)
    holder = ", ".join(map(str, found)) if found else "a process this user cannot see"
    raise PortTaken(port, service, variable, holder)


def holders(port: int) -> list[Holder]:
    """The processes holding a socket bound to ``port`` (any address, listening first)."""
    inodes = _socket_inodes(port)
    if not inodes:
        return []
    wanted = {f"socket:[{inode}]" for inode in inodes}
    found: list[Holder] = []
    for proc in PROC.iterdir():
        if proc.name.isdigit() and wanted & _links(proc):
            with contextlib.suppress(OSError):  # it may have exited meanwhile
                found.append(Holder(int(proc.name), _command(proc)))
    return found


def _links(proc: Path) -> set[str]:
    """What the open file descriptors of ``proc`` point at (those still open)."""
    links: set[str] = set()
    try:
        descriptors = list((proc / "fd").iterdir())
    except OSError:  # gone, or another user's
        return links
    for fd in descriptors:
        with contextlib.suppress(OSError):
            links.add(str(fd.readlink()))
    return links


def _socket_inodes(port: int) -> list[str]:
    """Inodes of the TCP sockets whose local port is ``port``, listening ones first."""
    listening: list[str] = []
    other: list[str] = []
    for table in ("tcp", "tcp6"):
        try:
            lines = (PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10:
                continue
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            if local_port != port or fields[9] == "0":
                continue
            (listening if fields[3] == LISTEN else other).append(fields[9])
    return listening + other


def _command(proc: Path) -> str:
    raw = (proc / "cmdline").read_bytes().replace(b"\0", b" ").strip()
    command = raw.decode(errors="replace")
    if not command:
        command = (proc / "comm").read_text().strip()
    return command if len(command) <= 120 else command[:117] + "..."
