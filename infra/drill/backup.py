"""The drill's backup and restore, as an operator runs them: PostgreSQL's client tools
(``pg_dump``, ``pg_restore``) against a database, and a restore in place."""

from __future__ import annotations

import subprocess
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from infra.local.postgres import PG_BIN


def pg_tool(tool: str, dsn: str, *args: str) -> None:
    """Run PostgreSQL's ``tool`` (``pg_dump``, ``pg_restore``) with ``args`` against
    the database of ``dsn``; raises with the tail of its stderr if it fails."""
    params = {k: v for k, v in conninfo_to_dict(dsn).items() if v is not None}
    command = [str(PG_BIN / tool), *args]
    for flag, key in (("-h", "host"), ("-p", "port"), ("-U", "user")):
        if key in params:
            command += [flag, str(params[key])]
    command += ["-d", str(params["dbname"])]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr[-2000:]}")


def restore_in_place(owner_dsn: str, backup: Path) -> None:
    """``pg_restore`` the backup into a new database, then put it in the old one's
    place (drop it, ending every session in it, and rename the new one): what an
    operator restoring in place does, with the database missing for a moment only."""
    name = str(conninfo_to_dict(owner_dsn)["dbname"])
    staging = f"{name}_restoring"
    admin = conninfo_to_dict(owner_dsn)
    admin["dbname"] = "postgres"
    with psycopg.connect(**admin, autocommit=True) as conn:  # type: ignore[arg-type]
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(staging)))
    target = conninfo_to_dict(owner_dsn)
    target["dbname"] = staging
    pg_tool("pg_restore", make_conninfo("", **target), "--exit-on-error", str(backup))
    with psycopg.connect(**admin, autocommit=True) as conn:  # type: ignore[arg-type]
        conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(
            sql.SQL("ALTER DATABASE {} RENAME TO {}").format(
                sql.Identifier(staging), sql.Identifier(name)
            )
        )
