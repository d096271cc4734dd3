"""An S3-compatible object store: versitygw serving `.local/s3/data` (posix backend).

versitygw maps buckets to directories and objects to files, keeping S3 metadata
(ETag, content type, user metadata) in extended attributes, or in a sidecar
directory when the filesystem has none. The root credentials are random, made
once per machine and kept in `.local/s3/credentials.json` (mode 0600), never in
the repository.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import string
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from infra.local.errors import ServiceError
from infra.local.layout import HOST, Layout
from infra.local.ports import require_free
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

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

NAME = "s3"
MARKER = "versitygw"  # executable name on the gateway's command line; see processes.alive
MODULE = "github.com/versity/versitygw/cmd/versitygw"
VERSION = "v1.8.0"
EVIDENCE_BUCKET = "gapless-evidence"
EXPORTS_BUCKET = "gapless-exports"
BUCKETS = (EVIDENCE_BUCKET, EXPORTS_BUCKET)
REGION = "us-east-1"
READY_TIMEOUT = 30.0
GO_HINT = "install Go (https://go.dev/doc/install, or sudo apt-get install -y golang-go)"


@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str


def endpoint(layout: Layout) -> str:
    return f"http://{HOST}:{layout.s3_port}"


def _s3_dir(layout: Layout) -> Path:
    return layout.local / "s3"


def _data_dir(layout: Layout) -> Path:
    return _s3_dir(layout) / "data"


def _binary(layout: Layout) -> Path:
    return layout.bin / "versitygw"


def _random(alphabet: str, length: int) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(length))


def credentials(layout: Layout) -> Credentials:
    """The gateway's root credentials, generated on first use.

    O_EXCL makes two concurrent first calls agree: one writes, the other fails
    to create and reads what the winner wrote.
    """
    path = _s3_dir(layout) / "credentials.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        fresh = {
            # Shaped like AWS keys: 20 upper-case alphanumerics / 40 mixed characters.
            "access_key": _random(string.ascii_uppercase + string.digits, 20),
            "secret_key": _random(string.ascii_letters + string.digits, 40),
        }
        with contextlib.suppress(FileExistsError):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as sink:
                json.dump(fresh, sink)
    try:
        stored = json.loads(path.read_text())
        return Credentials(str(stored["access_key"]), str(stored["secret_key"]))
    except (OSError, ValueError, KeyError) as exc:
        raise ServiceError(
            f"cannot read S3 credentials from {path}: {exc}",
            f"delete {path} (and {_data_dir(layout)} if its buckets are disposable) to regenerate",
        ) from exc


def client(layout: Layout) -> S3Client:
    """A boto3 S3 client for the local gateway (path-style, root credentials)."""
    creds = credentials(layout)
    return boto3.client(
        "s3",
        endpoint_url=endpoint(layout),
        aws_access_key_id=creds.access_key,
        aws_secret_access_key=creds.secret_key,
        region_name=REGION,
        config=Config(
            s3={"addressing_style": "path"},
            retries={"max_attempts": 2},
            connect_timeout=3,
            read_timeout=30,
        ),
    )


def built_binary(layout: Layout, echo: Callable[[str], None]) -> Path:
    """The versitygw binary, built with ``go install`` first if missing (the service
    images copy it in)."""
    return _ensure_binary(layout, echo)


def _ensure_binary(layout: Layout, echo: Callable[[str], None]) -> Path:
    binary = _binary(layout)
    if binary.is_file() and os.access(binary, os.X_OK):
        return binary
    go = require_tool("go", GO_HINT)
    echo(f"s3: building versitygw {VERSION} with go install (one time, a few minutes)")
    run(
        [go, "install", f"{MODULE}@{VERSION}"],
        what=f"go install {MODULE}@{VERSION}",
        hint="go needs to reach the Go module proxy (GOPROXY) to download versitygw",
        env={**os.environ, "GOBIN": str(layout.bin)},
        timeout=1800,
    )
    if not binary.is_file():
        raise ServiceError(f"go install finished but {binary} is missing", GO_HINT)
    return binary


def _supports_xattrs(directory: Path) -> bool:
    """Whether `directory`'s filesystem accepts user extended attributes."""
    probe = directory / ".xattr-probe"
    try:
        probe.touch()
        os.setxattr(probe, "user.gapless.probe", b"1")
    except OSError as exc:
        if exc.errno in (errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM):
            return False
        raise ServiceError(f"cannot write in {directory}: {exc}", "check its permissions") from exc
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()
    return True


def _backend_args(layout: Layout, echo: Callable[[str], None]) -> list[str]:
    """`posix` and its options; metadata goes to a sidecar dir without xattrs."""
    data = _data_dir(layout)
    data.mkdir(parents=True, exist_ok=True)
    if _supports_xattrs(data):
        return ["posix", str(data)]
    sidecar = _s3_dir(layout) / "meta"
    sidecar.mkdir(parents=True, exist_ok=True)
    echo(f"s3: {data} has no extended attributes; keeping object metadata in {sidecar}")
    return ["posix", "--sidecar", str(sidecar), str(data)]


def _answers(layout: Layout) -> bool:
    try:
        client(layout).list_buckets()
    except (BotoCoreError, ClientError):
        return False
    return True


def _wait_ready(layout: Layout, running: Callable[[], bool]) -> None:
    log = layout.log_file(NAME)

    def ready() -> bool:
        if not running():
            raise ServiceError(
                f"versitygw exited during start-up; last lines of {log}:\n{log_tail(log)}",
                f"see {log}",
            )
        return port_open(HOST, layout.s3_port) and _answers(layout)

    if not wait_until(ready, timeout=READY_TIMEOUT):
        raise ServiceError(
            f"versitygw not ready on {endpoint(layout)} after {READY_TIMEOUT:.0f}s", f"see {log}"
        )


def _create_buckets(layout: Layout, echo: Callable[[str], None]) -> None:
    s3 = client(layout)
    for bucket in BUCKETS:
        try:
            s3.head_bucket(Bucket=bucket)
            continue
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket"):
                raise ServiceError(f"s3: cannot inspect bucket {bucket}: {exc}", "") from exc
        echo(f"s3: creating bucket {bucket}")
        with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
            s3.create_bucket(Bucket=bucket)


def _our_pid(layout: Layout) -> int | None:
    pid = read_pid(layout.pid_file(NAME))
    return pid if pid is not None and alive(pid, MARKER) else None


def check_ports(layout: Layout) -> None:
    """Unless ours runs: ``PortTaken`` naming the holder if the gateway's port is taken."""
    if _our_pid(layout) is None:
        require_free(HOST, layout.s3_port, NAME, "GAPLESS_LOCAL_S3_PORT")


def start(layout: Layout, echo: Callable[[str], None]) -> None:
    """Start the gateway unless ours already runs; then ensure the buckets exist."""
    address = endpoint(layout)
    pid = _our_pid(layout)
    if pid is not None:
        echo(f"s3: already running on {address} (pid {pid})")
        known_pid = pid
        _wait_ready(layout, lambda: alive(known_pid, MARKER))
    else:
        check_ports(layout)
        binary = _ensure_binary(layout, echo)
        creds = credentials(layout)
        backend = _backend_args(layout, echo)
        echo(f"s3: starting versitygw on {address}")
        # Credentials travel in the environment, not argv, so `ps` does not show them.
        env = {
            **os.environ,
            "ROOT_ACCESS_KEY": creds.access_key,
            "ROOT_SECRET_KEY": creds.secret_key,
        }
        gateway = spawn(
            [str(binary), "--port", f"{HOST}:{layout.s3_port}", "--quiet", *backend],
            log=layout.log_file(NAME),
            pid_file=layout.pid_file(NAME),
            env=env,
            cwd=_s3_dir(layout),
        )
        _wait_ready(layout, lambda: gateway.poll() is None)
        pid = gateway.pid
    _create_buckets(layout, echo)
    echo(f"s3: ready on {address} (pid {pid})")


def stop(layout: Layout, echo: Callable[[str], None]) -> None:
    """SIGTERM the gateway gapless started; SIGKILL after 15 s."""
    pid_file = layout.pid_file(NAME)
    pid = _our_pid(layout)
    if pid is None:
        echo("s3: not started by gapless" if not pid_file.exists() else "s3: not running")
    else:
        echo(f"s3: stopping (pid {pid})")
        terminate(pid, MARKER, grace=15)
    with contextlib.suppress(FileNotFoundError):
        pid_file.unlink()


def status(layout: Layout) -> ServiceStatus:
    address = endpoint(layout)
    pid = _our_pid(layout)
    listening = port_open(HOST, layout.s3_port)
    if pid is None:
        detail = "port open, not started by gapless" if listening else "not running"
        return ServiceStatus(NAME, listening, address, None, detail)
    if not listening:
        return ServiceStatus(NAME, False, address, pid, "process up, port closed")
    return ServiceStatus(NAME, True, address, pid, "started by gapless")
