"""PostgreSQL as a primary and a standby under pg_auto_failover, for failover tests.

``GAPLESS_LOCAL_PG_STANDBY=sync`` (or ``async``) makes ``gapless up`` start, instead
of the one server of ``infra.local.postgres``, three PostgreSQL 15 instances, each
supervised by its own ``pg_autoctl run`` (Debian's ``pg-auto-failover-cli`` and
``postgresql-15-auto-failover``):

- the monitor (``GAPLESS_LOCAL_PG_PORT`` + 2), which holds the formation's state and
  health-checks the nodes; it decides failovers, it holds none of gapless's data;
- node 1 (``GAPLESS_LOCAL_PG_PORT``) and node 2 (+1): one is the primary, the other a
  streaming standby. ``sync``: the standby is in the primary's
  ``synchronous_standby_names`` (``ANY 1``), so a COMMIT returns once the standby has
  the WAL; ``async``: it is not (``--replication-quorum false``), so a COMMIT does not
  wait and a failover can lose the tail the standby had not received.

Why pg_auto_failover rather than Patroni: one tool from Debian's packages, no
separate consensus store (etcd) to run and keep healthy beside it, and its model is
this deployment's: one primary, one synchronous standby, automatic failover decided
by a monitor. The monitor is a single point of decision (not of data): while it is
down no failover happens, and the nodes go on as they are.

Clients reach whichever node is primary through one multi-host DSN with
``target_session_attrs=read-write`` (``dsn``). When the primary dies the monitor
notices within its health checks (tuned here to a few seconds), promotes the standby
(``wait_primary`` while it has no standby of its own), and a restarted old primary
rejoins as a standby (``pg_rewind``).

A start interrupted between two members (or inside one's ``create``) leaves the
members created so far: the next start runs their keepers and creates the rest, and
``pg_autoctl`` resumes a ``create`` it did not finish from the state it keeps. The
databases and the login are created last, through the primary, each only if missing.

Every process runs as the ``postgres`` user when we are root; each node's keeper is
started in a session of its own, so ``kill_node`` takes the keeper and its
postmaster down together, as a machine's death would (killing the postmaster alone
would only make its keeper start it again).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg

from infra.local import postgres
from infra.local.debian import ensure_packages
from infra.local.errors import ServiceError
from infra.local.layout import HOST, Layout
from infra.local.ports import require_free
from infra.local.processes import alive, port_open, read_pid, run, spawn, wait_until
from infra.local.status import ServiceStatus

Echo = Callable[[str], None]

PACKAGES = ("pg-auto-failover-cli", "postgresql-15-auto-failover")
PG_AUTOCTL = "pg_autoctl"
MARKER = "pg_autoctl"
READY_TIMEOUT = 120.0
MONITOR_DATABASE = "pg_auto_failover"
HEALTH_CHECKS = {
    "pgautofailover.health_check_period": "1000",
    "pgautofailover.health_check_timeout": "1000",
    "pgautofailover.health_check_max_retries": "1",
    "pgautofailover.health_check_retry_delay": "500",
    "pgautofailover.node_considered_unhealthy_timeout": "3000",
    "pgautofailover.primary_demote_timeout": "6000",
}
"""The monitor's health checks, from pg_auto_failover's 5-s period and 20-s
unhealthy timeout down to seconds, and how long it waits for a primary it gave up on
to confirm its demotion before promoting the standby (30 s by default), down to 6 s:
a local primary that stops answering is replaced within about ten seconds. The wait
must outlast the keepers' own ``NETWORK_PARTITION_S``: a primary cut off from the
monitor demotes itself within that, so two primaries never take writes."""
NETWORK_PARTITION_S = "3"
"""How long a keeper goes without reaching the monitor and its standby before it
takes itself for partitioned away and demotes its primary (20 s by default)."""


@dataclass(frozen=True)
class Member:
    """The monitor or a node: its name (pid and log files), port and data directory."""

    name: str
    port: int
    data: Path


def _home(layout: Layout) -> Path:
    return layout.local / "pg-ha"


def monitor(layout: Layout) -> Member:
    return Member("pg-monitor", layout.pg_port + 2, _home(layout) / "monitor")


def nodes(layout: Layout) -> list[Member]:
    return [
        Member(f"pg-node-{i}", layout.pg_port + i - 1, _home(layout) / f"node-{i}") for i in (1, 2)
    ]


def dsn(layout: Layout, database: str, user: str = postgres.SUPERUSER) -> str:
    """Whichever node is primary now: libpq tries each and keeps the read-write one."""
    hosts = ",".join(f"{HOST}:{n.port}" for n in nodes(layout))
    return f"postgresql://{user}@{hosts}/{database}?target_session_attrs=read-write"


def monitor_uri(layout: Layout) -> str:
    return f"postgresql://autoctl_node@{HOST}:{monitor(layout).port}/{MONITOR_DATABASE}?sslmode=disable"


def _environment(layout: Layout) -> dict[str, str]:
    """pg_autoctl finds pg_ctl on the PATH (Debian keeps it out of the default one),
    and keeps each member's configuration, state and pid file under the XDG
    directories: here, inside ``.local`` with the data, so removing ``.local`` leaves
    nothing behind that a new formation would trip over."""
    home = _home(layout)
    return {
        **os.environ,
        "PATH": f"{postgres.PG_BIN}:{os.environ.get('PATH', '')}",
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_DATA_HOME": str(home / "state"),
        "XDG_RUNTIME_DIR": str(home / "run"),
    }


def _keeper_pid(layout: Layout, member: Member) -> int | None:
    pid = read_pid(layout.pid_file(member.name))
    return pid if pid is not None and alive(pid, MARKER) else None


def _prepare(layout: Layout, member: Member) -> None:
    home = _home(layout)
    made = [home, *(home / d for d in ("config", "state", "run"))]
    for directory in made:
        directory.mkdir(parents=True, exist_ok=True)
    (home / "run").chmod(0o700)
    log = layout.log_file(member.name)
    log.touch(exist_ok=True)
    if os.geteuid() == 0:
        for path in (*made, log):
            shutil.chown(path, postgres.SUPERUSER, postgres.SUPERUSER)
        for directory in (layout.local, layout.logs):
            directory.chmod(directory.stat().st_mode | 0o001)


def _create_command(layout: Layout, member: Member, standby_mode: str) -> list[str]:
    """``pg_autoctl create`` for a member not created yet; the keeper runs it (``--run``)."""
    common = [
        "--pgdata", str(member.data), "--pgport", str(member.port), "--hostname", HOST,
        "--auth", "trust", "--no-ssl", "--pgctl", str(postgres.PG_BIN / "pg_ctl"),
    ]  # fmt: skip
    if member == monitor(layout):
        return [PG_AUTOCTL, "create", "monitor", *common, "--run"]
    quorum = ["--replication-quorum", "false"] if standby_mode == "async" else []
    return [
        PG_AUTOCTL, "create", "postgres", *common, "--monitor", monitor_uri(layout),
        "--name", member.name, "--dbname", "postgres", *quorum, "--run",
    ]  # fmt: skip


def _start_member(layout: Layout, member: Member, echo: Echo) -> None:
    """Start ``member``'s keeper unless it runs: ``create … --run`` the first time,
    ``run`` after (the data directory holds its configuration)."""
    if _keeper_pid(layout, member) is not None:
        return
    _prepare(layout, member)
    created = (member.data / "PG_VERSION").is_file()
    command = (
        [PG_AUTOCTL, "run", "--pgdata", str(member.data)]
        if created
        else _create_command(layout, member, layout.pg_standby)
    )
    echo(f"{member.name}: {'starting' if created else 'creating'} on {HOST}:{member.port}")
    spawn(
        postgres.as_cluster_owner(command),
        log=layout.log_file(member.name),
        pid_file=layout.pid_file(member.name),
        env=_environment(layout),
        cwd=_home(layout),
    )


def _connect(port: int, database: str) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(
        host=HOST,
        port=port,
        user=postgres.SUPERUSER,
        dbname=database,
        autocommit=True,
        connect_timeout=3,
    )


def _node_rows(layout: Layout) -> list[tuple[str, str, str]]:
    """Each node's name, the state it last reported and the one the monitor assigned
    it; empty while the monitor does not answer."""
    try:
        with _connect(monitor(layout).port, MONITOR_DATABASE) as conn:
            rows = conn.execute(
                "SELECT nodename, reportedstate::text, goalstate::text FROM pgautofailover.node"
            ).fetchall()
    except psycopg.Error:
        return []
    return [(str(name), str(reported), str(goal)) for name, reported, goal in rows]


def states(layout: Layout) -> dict[str, str]:
    """Each node's state as the monitor last heard it reported (``primary``,
    ``secondary``, ``wait_primary``, …); a dead node's stays what it last said."""
    return {name: reported for name, reported, _goal in _node_rows(layout)}


WRITABLE = ("single", "wait_primary", "primary")


def _wait_for(layout: Layout, wanted: Callable[[dict[str, str]], bool], what: str) -> None:
    if not wait_until(lambda: wanted(states(layout)), timeout=READY_TIMEOUT, interval=0.5):
        logs = ", ".join(str(layout.log_file(m.name)) for m in (monitor(layout), *nodes(layout)))
        raise ServiceError(
            f"postgres: {what} not reached in {READY_TIMEOUT:.0f}s (states {states(layout)})",
            f"see {logs}",
        )


def _tune_monitor(layout: Layout) -> None:
    with _connect(monitor(layout).port, "postgres") as conn:
        for name, value in HEALTH_CHECKS.items():
            conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
        conn.execute("SELECT pg_reload_conf()")


def _tune_keeper(layout: Layout, node: Member) -> None:
    """``NETWORK_PARTITION_S`` in the node's configuration (kept in its data
    directory for later starts), then the keeper told to read it again."""
    setting = ["config", "set", "--pgdata", str(node.data)]
    run(
        postgres.as_cluster_owner(
            [PG_AUTOCTL, *setting, "timeout.network_partition_timeout", NETWORK_PARTITION_S]
        ),
        what="pg_autoctl config set",
        hint=f"see {node.data}/pg_autoctl.cfg",
        env=_environment(layout),
        cwd=node.data.parent,
    )
    run(
        postgres.as_cluster_owner([PG_AUTOCTL, "reload", "--pgdata", str(node.data)]),
        what="pg_autoctl reload",
        hint="is the node's keeper running?",
        env=_environment(layout),
        cwd=node.data.parent,
    )


def _serving(found: dict[str, str]) -> bool:
    return set(found.values()) in ({"primary", "secondary"},)


def check_ports(layout: Layout) -> None:
    for member in (monitor(layout), *nodes(layout)):
        if _keeper_pid(layout, member) is None:
            require_free(HOST, member.port, member.name, "GAPLESS_LOCAL_PG_PORT")


def start(layout: Layout, echo: Echo) -> None:
    """Start the monitor, then node 1, then node 2 (each created the first time);
    wait for a primary with its standby; then the databases and the application login,
    through the primary."""
    ensure_packages(PACKAGES, [PG_AUTOCTL], echo, "pg_auto_failover")
    check_ports(layout)
    first, second = nodes(layout)
    mon = monitor(layout)
    _start_member(layout, mon, echo)
    if not wait_until(lambda: _answers(mon.port, MONITOR_DATABASE), timeout=READY_TIMEOUT):
        raise ServiceError(
            "postgres: the monitor does not answer", f"see {layout.log_file(mon.name)}"
        )
    _tune_monitor(layout)
    _start_member(layout, first, echo)
    _wait_for(layout, lambda s: first.name in s or second.name in s, "a first node")
    _start_member(layout, second, echo)
    _wait_for(layout, _serving, "a primary and its standby")
    for node in (first, second):
        _tune_keeper(layout, node)
    with psycopg.connect(dsn(layout, "postgres"), autocommit=True, connect_timeout=3) as conn:
        postgres.create_databases(conn, layout, echo)
        postgres.ensure_app_login(conn)
    echo(f"postgres: ready, {layout.pg_standby} standby ({dsn(layout, '…')})")


def _answers(port: int, database: str) -> bool:
    try:
        with _connect(port, database) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error:
        return False
    return True


def primary(layout: Layout) -> Member | None:
    """The node that takes writes now: it reported a writable state and the monitor
    still assigns it one (a dead primary's last report stays ``primary`` while the
    monitor has already demoted it)."""
    writable = {
        name for name, reported, goal in _node_rows(layout) if {reported, goal} <= set(WRITABLE)
    }
    return next((n for n in nodes(layout) if n.name in writable), None)


def kill_node(layout: Layout, member: Member, echo: Echo) -> None:
    """SIGKILL ``member``'s keeper and its postmaster together (its whole session)."""
    pid = _keeper_pid(layout, member)
    if pid is None:
        raise ServiceError(f"{member.name} is not running", "start it with `gapless up`")
    echo(f"{member.name}: SIGKILL (keeper {pid} and its postgres)")
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    wait_until(lambda: not port_open(HOST, member.port), timeout=30, interval=0.1)


def restart_node(layout: Layout, member: Member, echo: Echo) -> None:
    """Start a killed node's keeper again: it rejoins as a standby."""
    _start_member(layout, member, echo)


def stop(layout: Layout, echo: Echo) -> None:
    """SIGTERM the nodes' keepers (each stops its postgres), then the monitor's."""
    for group in (nodes(layout), [monitor(layout)]):
        pids = [(m, _keeper_pid(layout, m)) for m in group]
        for member, pid in pids:
            if pid is not None:
                echo(f"{member.name}: stopping (pid {pid})")
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGTERM)
        for member, pid in pids:
            if pid is not None and not wait_until(_gone(pid), timeout=60):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(FileNotFoundError):
                layout.pid_file(member.name).unlink()


def _gone(pid: int) -> Callable[[], bool]:
    return lambda: not alive(pid, MARKER)


def status(layout: Layout) -> list[ServiceStatus]:
    found = states(layout)
    result = []
    for member in (monitor(layout), *nodes(layout)):
        pid = _keeper_pid(layout, member)
        up = pid is not None and port_open(HOST, member.port)
        detail = found.get(member.name, "monitor") if up else "not running"
        result.append(ServiceStatus(member.name, up, f"{HOST}:{member.port}", pid, detail))
    return result
