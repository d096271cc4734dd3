"""Apicurio Registry 3 as the local Confluent-compatible schema registry.

The application comes from Maven Central as one tarball
(``io.apicurio:apicurio-registry-app:<version>:tar.gz:all``, a Quarkus application)
fetched with ``mvn dependency:get`` into ``~/.m2`` and unpacked under
``.local/registry/<version>``; it needs Java 21 or later, looked up under
``/usr/lib/jvm`` (or ``GAPLESS_LOCAL_REGISTRY_JAVA``). It keeps its data in the
local PostgreSQL, in a database of its own (``Layout.registry_database``, created by
``gapless up`` with the others), through Apicurio's own SQL storage, which creates
and upgrades its tables itself: every schema id it handed out survives ``gapless
down`` and ``up``, so messages already in Kafka keep naming the schemas they were
written with. It starts after PostgreSQL and stops before it. The Confluent API is
at ``<address>/apis/ccompat/v7``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tarfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from infra.local import postgres_ha
from infra.local.errors import ServiceError
from infra.local.layout import HOST, Layout
from infra.local.ports import require_free
from infra.local.postgres import SUPERUSER
from infra.local.processes import (
    alive,
    log_tail,
    port_open,
    read_pid,
    require_tool,
    run,
    spawn,
    terminate,
    wait_until,
)
from infra.local.status import ServiceStatus

NAME = "registry"
VERSION = "3.3.3"
ARTIFACT = f"io.apicurio:apicurio-registry-app:{VERSION}:tar.gz:all"
MARKER = "quarkus-run.jar"  # on the registry's command line; see processes.alive
CCOMPAT_PATH = "/apis/ccompat/v7"
READY_TIMEOUT = 120.0
POOL_MIN = 2  # the registry's PostgreSQL connections: held from start
POOL_MAX = 8  # and at most
JVM_DIR = Path("/usr/lib/jvm")
JAVA_VARIABLE = "GAPLESS_LOCAL_REGISTRY_JAVA"
JAVA_HINT = (
    "install a Java 21+ runtime (e.g. Temurin 25 under /usr/lib/jvm), or point "
    f"{JAVA_VARIABLE} at its java"
)
MVN_HINT = "install Maven 3: sudo apt-get install -y maven"
_JVM_MAJOR = re.compile(r"(?:^|[-_])(\d{2})(?:[-_.]|$)")


def address(layout: Layout) -> str:
    return f"http://{HOST}:{layout.registry_port}"


def url(layout: Layout) -> str:
    """The Confluent-compatible API, what ``GAPLESS_SCHEMA_REGISTRY_URL`` names."""
    return address(layout) + CCOMPAT_PATH


def _home(layout: Layout) -> Path:
    return layout.local / "registry" / VERSION


def _stdout_log(layout: Layout) -> Path:
    return layout.log_file(NAME)


def _tarball() -> Path:
    group, artifact, version, _kind, classifier = ARTIFACT.split(":")
    repository = Path.home() / ".m2" / "repository"
    return (
        repository.joinpath(*group.split("."), artifact, version)
        / f"{artifact}-{version}-{classifier}.tar.gz"
    )


def _java() -> str:
    """A java of release 21 or later: the variable's, else the newest under /usr/lib/jvm."""
    configured = os.environ.get(JAVA_VARIABLE)
    if configured:
        return configured
    found: list[tuple[int, Path]] = []
    if JVM_DIR.is_dir():
        for home in JVM_DIR.iterdir():
            match = _JVM_MAJOR.search(home.name)
            java = home / "bin" / "java"
            if match and int(match.group(1)) >= 21 and java.is_file():
                found.append((int(match.group(1)), java))
    if not found:
        raise ServiceError("no Java 21+ runtime found for the schema registry", JAVA_HINT)
    return str(max(found)[1])


def java_home() -> Path:
    """The home of the Java 21+ runtime the registry runs on (the registry's service
    image copies it in: Debian bookworm packages no Java 21)."""
    return Path(_java()).resolve().parent.parent


def unpacked(layout: Layout, echo: Callable[[str], None]) -> Path:
    """The application's directory, fetched and unpacked first if missing (the
    registry's service image copies it in)."""
    return _unpack(layout, echo)


def _unpack(layout: Layout, echo: Callable[[str], None]) -> Path:
    """``.local/registry/<version>`` with the application, fetched and unpacked once.

    The tarball is unpacked into a staging directory renamed into place only when
    complete, so an interrupted unpack is never mistaken for an application.
    """
    home = _home(layout)
    if (home / MARKER).is_file():
        return home
    tarball = _tarball()
    if not tarball.is_file():
        mvn = require_tool("mvn", MVN_HINT)
        echo(f"registry: fetching {ARTIFACT} with Maven (one time, ~160 MB)")
        run(
            [mvn, "-q", "-B", "dependency:get", "-Dtransitive=false", f"-Dartifact={ARTIFACT}"],
            what="mvn dependency:get",
            hint="Maven needs to reach Maven Central (or a mirror in ~/.m2/settings.xml)",
        )
    staging = home.with_name(home.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    with tarfile.open(tarball) as archive:
        archive.extractall(staging, filter="data")
    shutil.rmtree(home, ignore_errors=True)
    staging.rename(home)
    return home


def storage_url(layout: Layout) -> str:
    """The JDBC URL of the registry's database in the local PostgreSQL; with a
    standby (``GAPLESS_LOCAL_PG_STANDBY``) both nodes, the driver keeping the primary."""
    if layout.pg_standby == "none":
        return f"jdbc:postgresql://{HOST}:{layout.pg_port}/{layout.registry_database}"
    hosts = ",".join(f"{HOST}:{node.port}" for node in postgres_ha.nodes(layout))
    return f"jdbc:postgresql://{hosts}/{layout.registry_database}?targetServerType=primary"


def _command(layout: Layout, java: str, home: Path) -> list[str]:
    return [
        java,
        "-Xmx512m",
        f"-Dquarkus.http.host={HOST}",
        f"-Dquarkus.http.port={layout.registry_port}",
        f"-Dquarkus.management.host={HOST}",
        f"-Dquarkus.management.port={layout.registry_management_port}",
        # Apicurio's SQL storage in PostgreSQL (trust authentication on loopback).
        "-Dapicurio.storage.kind=sql",
        "-Dapicurio.storage.sql.kind=postgresql",
        f"-Dapicurio.datasource.url={storage_url(layout)}",
        f"-Dapicurio.datasource.username={SUPERUSER}",
        "-Dapicurio.datasource.password=",
        # Apicurio's pool holds 20 connections from start and may grow to 100, the
        # local PostgreSQL's whole max_connections: a registry that serves a few
        # schema lookups a second needs few, and the relay, agents, drills and test
        # sandboxes need the rest.
        f"-Dapicurio.datasource.jdbc.initial-size={POOL_MIN}",
        f"-Dapicurio.datasource.jdbc.min-size={POOL_MIN}",
        f"-Dapicurio.datasource.jdbc.max-size={POOL_MAX}",
        "-jar",
        str(home / MARKER),
    ]


def ready(layout: Layout) -> bool:
    """True if the Confluent-compatible API answers."""
    try:
        with urllib.request.urlopen(url(layout) + "/subjects", timeout=2) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError):
        return False


def _wait_ready(layout: Layout, running: Callable[[], bool]) -> None:
    log = _stdout_log(layout)

    def up() -> bool:
        if not running():
            raise ServiceError(
                f"registry exited during start-up; last lines of {log}:\n{log_tail(log)}",
                f"see {log}",
            )
        return ready(layout)

    if not wait_until(up, timeout=READY_TIMEOUT, interval=0.5):
        raise ServiceError(
            f"registry not ready on {address(layout)} after {READY_TIMEOUT:.0f}s", f"see {log}"
        )


def _ready_file(layout: Layout) -> Path:
    """``<pid> <seconds>``: how long the registry gapless started took to answer."""
    return layout.pids / f"{NAME}.ready"


def _startup_s(layout: Layout, pid: int) -> float | None:
    try:
        recorded_pid, seconds = _ready_file(layout).read_text().split()
    except (OSError, ValueError):
        return None
    return float(seconds) if int(recorded_pid) == pid else None


def _rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        return None
    return None


def _our_pid(layout: Layout) -> int | None:
    pid = read_pid(layout.pid_file(NAME))
    return pid if pid is not None and alive(pid, MARKER) else None


def check_ports(layout: Layout) -> None:
    """Unless ours runs: ``PortTaken`` naming the holder if a port of the registry is taken."""
    if _our_pid(layout) is None:
        require_free(HOST, layout.registry_port, NAME, "GAPLESS_LOCAL_REGISTRY_PORT")
        management = "GAPLESS_LOCAL_REGISTRY_MANAGEMENT_PORT"
        require_free(HOST, layout.registry_management_port, f"{NAME} management", management)


def start(layout: Layout, echo: Callable[[str], None]) -> None:
    """Start the registry unless ours already runs; wait until its API answers."""
    pid = _our_pid(layout)
    if pid is not None:
        echo(f"registry: already running on {address(layout)} (pid {pid})")
        _wait_ready(layout, lambda: alive(pid, MARKER))
        return
    check_ports(layout)
    java = _java()
    home = _unpack(layout, echo)
    echo(f"registry: starting on {address(layout)}")
    began = time.monotonic()
    process = spawn(
        _command(layout, java, home),
        log=_stdout_log(layout),
        pid_file=layout.pid_file(NAME),
        cwd=home,
    )
    _wait_ready(layout, lambda: process.poll() is None)
    seconds = time.monotonic() - began
    _ready_file(layout).write_text(f"{process.pid} {seconds:.2f}\n")
    echo(f"registry: ready on {address(layout)} (pid {process.pid}) in {seconds:.1f}s")


def stop(layout: Layout, echo: Callable[[str], None]) -> None:
    """SIGTERM the registry gapless started, SIGKILL after 30 s (what it stored is in
    PostgreSQL, committed as each request was answered)."""
    pid_file = layout.pid_file(NAME)
    pid = _our_pid(layout)
    if pid is None:
        echo(
            "registry: not started by gapless" if not pid_file.exists() else "registry: not running"
        )
    else:
        echo(f"registry: stopping (pid {pid})")
        terminate(pid, MARKER, grace=30)
    for stale in (pid_file, _ready_file(layout)):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()


def status(layout: Layout) -> ServiceStatus:
    where = address(layout)
    pid = _our_pid(layout)
    listening = port_open(HOST, layout.registry_port)
    if pid is None:
        detail = "port open, not started by gapless" if listening else "not running"
        return ServiceStatus(NAME, listening, where, None, detail)
    if not listening:
        return ServiceStatus(NAME, False, where, pid, "process up, API port closed")
    startup, rss = _startup_s(layout, pid), _rss_mb(pid)
    measured = "".join(
        [
            f"; ready in {startup:.1f} s" if startup is not None else "",
            f"; {rss:.0f} MB resident" if rss is not None else "",
        ]
    )
    return ServiceStatus(
        NAME,
        True,
        where,
        pid,
        f"started by gapless (API {CCOMPAT_PATH}; schemas in database"
        f" {layout.registry_database}{measured})",
        startup_s=startup,
        rss_mb=None if rss is None else round(rss, 1),
    )
