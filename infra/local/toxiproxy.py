"""toxiproxy, the TCP fault proxy, as a local tool: built once with ``go install``.

The server is ``github.com/Shopify/toxiproxy/v2/cmd/server`` at ``VERSION``; Go names
the binary after its package (``server``), so it is built into a staging directory
and installed as ``.local/bin/toxiproxy-server``. A stamp file beside it names the
version, so a second call is a no-op and a new ``VERSION`` rebuilds. Nothing is run
here: ``infra.chaos.proxy`` starts and drives the server.

``python -m infra.local.toxiproxy`` installs it (the Makefile's ``make test`` does).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from infra.local.errors import ServiceError
from infra.local.layout import Layout, current_layout
from infra.local.processes import require_tool, run

MODULE = "github.com/Shopify/toxiproxy/v2/cmd/server"
VERSION = "v2.12.0"
BINARY = "toxiproxy-server"
GO_HINT = "install Go (https://go.dev/doc/install, or sudo apt-get install -y golang-go)"


def binary(layout: Layout) -> Path:
    return layout.bin / BINARY


def stamp(layout: Layout) -> Path:
    return layout.bin / f".{BINARY}-{VERSION}"


def ensure_binary(layout: Layout, echo: Callable[[str], None]) -> Path:
    """The server's executable, built first if this version is not installed yet."""
    target = binary(layout)
    if stamp(layout).is_file() and target.is_file() and os.access(target, os.X_OK):
        return target
    go = require_tool("go", GO_HINT)
    echo(f"toxiproxy: building {BINARY} {VERSION} with go install (one time, about a minute)")
    staging = layout.bin / ".toxiproxy-build"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    run(
        [go, "install", f"{MODULE}@{VERSION}"],
        what=f"go install {MODULE}@{VERSION}",
        hint="go needs to reach the Go module proxy (GOPROXY) to download toxiproxy",
        env={**os.environ, "GOBIN": str(staging)},
        timeout=1800,
    )
    built = staging / "server"
    if not built.is_file():
        raise ServiceError(f"go install finished but {built} is missing", GO_HINT)
    for old in layout.bin.glob(f".{BINARY}-*"):
        old.unlink()
    built.replace(target)
    shutil.rmtree(staging, ignore_errors=True)
    stamp(layout).touch()
    return target


def main() -> None:
    layout = current_layout()
    layout.ensure_dirs()
    print(ensure_binary(layout, print))


if __name__ == "__main__":
    main()
