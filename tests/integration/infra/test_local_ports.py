"""``gapless up`` refuses a taken port before it starts anything, naming the program
that holds it and the variable that moves it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path


def _up(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "infra.cli", "up"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_up_names_the_holder_of_a_taken_port_and_the_variable(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = int(held.getsockname()[1])
        env = dict(os.environ, GAPLESS_LOCAL_DIR=str(tmp_path), GAPLESS_LOCAL_S3_PORT=str(port))
        # Every other port of this fresh directory is free: move them off the running ones.
        for variable in (
            "GAPLESS_LOCAL_PG_PORT",
            "GAPLESS_LOCAL_KAFKA_PORT",
            "GAPLESS_LOCAL_KAFKA_CONTROLLER_PORT",
        ):
            with socket.socket() as free:
                free.bind(("127.0.0.1", 0))
                env[variable] = str(free.getsockname()[1])
        done = _up(env)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert f"s3: port {port} is taken by pid {os.getpid()}" in output
    assert "set GAPLESS_LOCAL_S3_PORT to a free port" in output
    # Checked before anything started: no cluster was made in the fresh directory.
    assert not (tmp_path / "pg" / "data").exists()


def test_up_names_a_running_postgres_holding_the_port(tmp_path: Path) -> None:
    """Another directory's cluster on the same port is someone else's program."""
    from infra.local.layout import current_layout
    from infra.local.services import up

    up(lambda _message: None)
    env = dict(
        os.environ,
        GAPLESS_LOCAL_DIR=str(tmp_path),
        GAPLESS_LOCAL_PG_PORT=str(current_layout().pg_port),
    )
    done = _up(env)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert f"postgres: port {current_layout().pg_port} is taken by pid " in output
    assert "postgres" in output.split("is taken by", 1)[1]
    assert "set GAPLESS_LOCAL_PG_PORT" in output
