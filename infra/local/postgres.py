"""PostgreSQL 15 from the Debian packages, as one cluster under `.local/pg`.

The cluster listens on 127.0.0.1 only, trusts every local connection (it is a
developer database; nothing secret lives in it) and holds the three databases
the pipeline uses: `resolver`, `product` and `control`. Besides the superuser, which
owns the tables and runs the migrations, it has the login the resolver's services
connect as, `gapless_resolver_service`: a member of the application role
`gapless_resolver_app` (created here if the migrations have not yet), so it holds
only that role's grants. With trust authentication it needs no password.

initdb and the postmaster refuse to run as root, so when we are root the
cluster's directories are handed to the `postgres` system user (created by the
Debian package) and the server tools run through `runuser -u postgres --`.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import stat
from collections.abc import Callable, Sequence
from pathlib import Path

import psycopg
from psycopg import sql

from db.tables.domain import APP_ROLE
from infra.local.errors import ServiceError
from infra.local.layout import HOST, Layout
from infra.local.ports import require_free
from infra.local.processes import (
    alive,
    port_open,
    read_pid,
    require_tool,
    run,
    wait_until,
    write_pid,
)
from infra.local.status import ServiceStatus

NAME = "postgres"
PG_BIN = Path("/usr/lib/postgresql/15/bin")
DATABASES = ("resolver", "product", "control")
SUPERUSER = "postgres"
APP_LOGIN = "gapless_resolver_service"
"""The login the resolver's services use locally (``GAPLESS_RESOLVER_DSN``)."""
INSTALL_HINT = "install PostgreSQL 15 server binaries: sudo apt-get install -y postgresql-15"
LOGICAL_DECODING = "-c wal_level=logical -c max_wal_senders=10 -c max_replication_slots=10"
"""Logical decoding on, for the peers bench's Debezium connector (``pgoutput``): it
only adds the row images logical decoding needs to the WAL; nothing else reads it.
Set at start, so a cluster started before this line needs ``gapless down && up``."""
SIZING = (
    "-c shared_buffers=1GB -c max_wal_size=8GB -c checkpoint_timeout=15min"
    " -c maintenance_work_mem=256MB"
)
"""Memory and checkpoints sized for catalogs of a million items rather than
PostgreSQL's defaults (128 MB of buffers, a checkpoint every 1 GB of WAL): a rebuild
loads about 8 million rows of such a catalog, and at the defaults it wrote them
through a checkpoint every few seconds (each followed by full-page images of every
page touched again) and evicted its own dirty pages from the buffers. Set at start,
like ``LOGICAL_DECODING``."""


def dsn(layout: Layout, database: str, user: str = SUPERUSER) -> str:
    return f"postgresql://{user}@{HOST}:{layout.pg_port}/{database}"


def ensure_app_login(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """Create the services' login and its application role, if missing (idempotent).

    Roles belong to the whole cluster, and several processes may run this at once:
    the loser of a race to create one sees ``duplicate_object`` and goes on. The
    login inherits the role's grants (``INHERIT``) and nothing else: no superuser,
    no CREATEDB, no CREATEROLE; the migrations grant the role what it may do.
    """
    conn.execute(
        "DO $$ BEGIN"
        f" IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{APP_ROLE}') THEN"
        f" CREATE ROLE {APP_ROLE} NOLOGIN; END IF;"
        " EXCEPTION WHEN duplicate_object THEN NULL; END $$"
    )
    conn.execute(
        "DO $$ BEGIN"
        f" IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{APP_LOGIN}') THEN"
        f" CREATE ROLE {APP_LOGIN} LOGIN INHERIT IN ROLE {APP_ROLE}; END IF;"
        " EXCEPTION WHEN duplicate_object THEN NULL; END $$"
    )


def _pg_dir(layout: Layout) -> Path:
    return layout.local / "pg"


def _data_dir(layout: Layout) -> Path:
    return _pg_dir(layout) / "data"


def _socket_dir(layout: Layout) -> Path:
    return _pg_dir(layout) / "run"


def _is_root() -> bool:
    return os.geteuid() == 0


def as_cluster_owner(command: Sequence[str]) -> list[str]:
    """`command`, run as `postgres` when we are root (initdb and pg_ctl refuse root)."""
    if _is_root():
        runuser = require_tool("runuser", "install util-linux: sudo apt-get install -y util-linux")
        return [runuser, "-u", SUPERUSER, "--", *command]
    return list(command)


def _ensure_binaries(echo: Callable[[str], None]) -> None:
    """Install postgresql-15 with apt-get if its binaries are missing and we may."""
    if (PG_BIN / "initdb").is_file():
        return
    if not _is_root() or shutil.which("apt-get") is None:
        raise ServiceError(f"PostgreSQL 15 server binaries not found in {PG_BIN}", INSTALL_HINT)
    echo("postgres: installing postgresql-15 with apt-get (one time)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", "postgresql-15"]
    try:
        run(install, what="apt-get install postgresql-15", hint=INSTALL_HINT, env=env)
    except ServiceError:
        # A fresh image often has no package lists yet; refresh once and retry.
        run(["apt-get", "update"], what="apt-get update", hint=INSTALL_HINT, env=env)
        run(install, what="apt-get install postgresql-15", hint=INSTALL_HINT, env=env)
    if not (PG_BIN / "initdb").is_file():
        raise ServiceError(f"postgresql-15 installed but {PG_BIN}/initdb is missing", INSTALL_HINT)


def _untraversable_ancestor(path: Path) -> Path | None:
    """The first directory above `path` that other users cannot enter, if any."""
    for parent in reversed(path.parents):
        if not parent.stat().st_mode & stat.S_IXOTH:
            return parent
    return None


def _prepare_dirs(layout: Layout) -> None:
    """Create the cluster's directories and make them usable by the `postgres` user.

    When we are root the server runs as `postgres`, which must be able to walk
    from / down to the data directory and to append to the log file. Inside
    `.local` we grant that ourselves (o+x on directories, no read or list); a
    directory above `.local` that blocks it is not ours to loosen, so that is an
    error naming it.
    """
    pg, data, sockets = _pg_dir(layout), _data_dir(layout), _socket_dir(layout)
    blocked = _untraversable_ancestor(layout.local) if _is_root() else None
    if blocked is not None:
        raise ServiceError(
            f"the postgres user cannot reach {data}: {blocked} is not searchable by others",
            f"run `chmod o+x {blocked}` or set GAPLESS_LOCAL_DIR to a directory "
            "outside it (e.g. /var/tmp/gapless)",
        )
    for directory in (pg, data, sockets):
        directory.mkdir(parents=True, exist_ok=True)
    log = layout.log_file(NAME)
    log.touch(exist_ok=True)
    if not _is_root():
        data.chmod(0o700)
        return
    shutil.chown(pg, SUPERUSER, SUPERUSER)
    shutil.chown(data, SUPERUSER, SUPERUSER)
    shutil.chown(sockets, SUPERUSER, SUPERUSER)
    shutil.chown(log, SUPERUSER, SUPERUSER)
    data.chmod(0o700)  # the postmaster refuses a group- or world-readable data dir
    for directory in (layout.local, layout.logs):
        directory.chmod(directory.stat().st_mode | stat.S_IXOTH)


def _initdb(layout: Layout, echo: Callable[[str], None]) -> None:
    """Create the cluster once; PG_VERSION marks an initialised data directory."""
    data = _data_dir(layout)
    if (data / "PG_VERSION").is_file():
        return
    echo(f"postgres: initialising a cluster in {data}")
    command = [
        str(PG_BIN / "initdb"),
        "-D", str(data),
        "-U", SUPERUSER,
        "--auth=trust",
        "-E", "UTF8",
        "--locale=C.UTF-8",
    ]  # fmt: skip
    run(
        as_cluster_owner(command),
        what="initdb",
        hint="remove the half-made data directory and retry: rm -rf " + str(data),
        cwd=_pg_dir(layout),
    )


def _postmaster_pid(layout: Layout) -> int | None:
    """The running postmaster of our cluster, from its own postmaster.pid."""
    data = _data_dir(layout)
    pid = read_pid(data / "postmaster.pid")
    if pid is not None and alive(pid, str(data)):
        return pid
    return None


def _connect(layout: Layout, database: str = "postgres") -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(
        host=HOST,
        port=layout.pg_port,
        user=SUPERUSER,
        dbname=database,
        autocommit=True,
        connect_timeout=3,
    )


def _accepts_connections(layout: Layout) -> bool:
    try:
        with _connect(layout) as connection:
            connection.execute("SELECT 1")
    except psycopg.Error:
        return False
    return True


def create_databases(
    connection: psycopg.Connection[tuple[object, ...]], layout: Layout, echo: Callable[[str], None]
) -> None:
    """gapless's three databases, and the schema registry's (its own SQL storage)."""
    for database in (*DATABASES, layout.registry_database):
        found = connection.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (database,)
        ).fetchone()
        if found is None:
            echo(f"postgres: creating database {database}")
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))


def check_ports(layout: Layout) -> None:
    """Unless our cluster runs: ``PortTaken`` naming the holder if its port is taken."""
    if _postmaster_pid(layout) is None:
        require_free(HOST, layout.pg_port, NAME, "GAPLESS_LOCAL_PG_PORT")


def start(layout: Layout, echo: Callable[[str], None]) -> None:
    """Start the cluster unless it already runs, then ensure the databases exist."""
    _ensure_binaries(echo)
    check_ports(layout)
    pid = _postmaster_pid(layout)
    _prepare_dirs(layout)
    _initdb(layout, echo)
    log = layout.log_file(NAME)
    address = f"{HOST}:{layout.pg_port}"
    if pid is not None:
        echo(f"postgres: already running on {address} (pid {pid})")
    else:
        echo(f"postgres: starting on {address}")
        options = (
            f"-p {layout.pg_port} -k {shlex.quote(str(_socket_dir(layout)))} "
            f"-c listen_addresses={HOST} {LOGICAL_DECODING} {SIZING}"
        )
        pg_ctl = [str(PG_BIN / "pg_ctl"), "-D", str(_data_dir(layout)), "-l", str(log)]
        run(
            as_cluster_owner([*pg_ctl, "-o", options, "-w", "-t", "60", "start"]),
            what="pg_ctl start",
            hint=f"see {log}",
            cwd=_pg_dir(layout),
        )
        pid = _postmaster_pid(layout)
        if pid is None:
            raise ServiceError("postgres exited right after starting", f"see {log}")
        write_pid(layout.pid_file(NAME), pid)
    if not wait_until(lambda: _accepts_connections(layout), timeout=30):
        raise ServiceError(f"postgres on {address} does not accept connections", f"see {log}")
    with _connect(layout) as connection:
        create_databases(connection, layout, echo)
        ensure_app_login(connection)
    echo(f"postgres: ready on {address}")


def stop(layout: Layout, echo: Callable[[str], None]) -> None:
    """Stop the cluster with `pg_ctl stop -m fast`, only if gapless started it."""
    pid_file = layout.pid_file(NAME)
    if read_pid(pid_file) is None:
        echo("postgres: not started by gapless; leaving it alone")
        return
    if _postmaster_pid(layout) is not None:
        echo("postgres: stopping")
        pg_ctl = [str(PG_BIN / "pg_ctl"), "-D", str(_data_dir(layout)), "-m", "fast", "-w"]
        run(
            as_cluster_owner([*pg_ctl, "stop"]),
            what="pg_ctl stop",
            hint=f"see {layout.log_file(NAME)}",
            cwd=_pg_dir(layout),
        )
    else:
        echo("postgres: was not running")
    with contextlib.suppress(FileNotFoundError):
        pid_file.unlink()


def crash(layout: Layout, echo: Callable[[str], None]) -> None:
    """Stop the cluster the way a crash does (``pg_ctl stop -m immediate``: no
    checkpoint, every connection cut); ``start`` brings it back through crash
    recovery. For fault-injection tests; the pid file stays, so ``down`` still stops
    the restarted server."""
    if _postmaster_pid(layout) is None:
        raise ServiceError("postgres is not running", "start it with `gapless up`")
    echo("postgres: immediate shutdown")
    pg_ctl = [str(PG_BIN / "pg_ctl"), "-D", str(_data_dir(layout)), "-m", "immediate", "-w"]
    run(
        as_cluster_owner([*pg_ctl, "stop"]),
        what="pg_ctl stop -m immediate",
        hint=f"see {layout.log_file(NAME)}",
        cwd=_pg_dir(layout),
    )


def status(layout: Layout) -> ServiceStatus:
    address = f"{HOST}:{layout.pg_port}"
    pid = _postmaster_pid(layout)
    if pid is None:
        return ServiceStatus(NAME, False, address, None, "not running")
    owned = read_pid(layout.pid_file(NAME)) == pid
    if not port_open(HOST, layout.pg_port):
        return ServiceStatus(NAME, False, address, pid, "process up but port closed")
    detail = "started by gapless" if owned else "running, not started by gapless"
    return ServiceStatus(NAME, True, address, pid, detail)
