"""Tools this project takes from Debian's packages, installed with ``apt-get`` when
one is missing and this process may (root, on a host with apt): the container tools
(``infra.image.podman``) and ``promtool`` (``infra.local.promtool``). Elsewhere a
missing tool fails with the command that installs it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence

from infra.local.errors import ServiceError
from infra.local.processes import run

Echo = Callable[[str], None]


def install_hint(packages: Sequence[str]) -> str:
    return "install them: sudo apt-get install -y --no-install-recommends " + " ".join(packages)


def ensure_packages(packages: Sequence[str], tools: Sequence[str], echo: Echo, what: str) -> None:
    """Install ``packages`` if any executable of ``tools`` is not on the PATH."""
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if not missing:
        return
    hint = install_hint(packages)
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise ServiceError(f"{what} missing: {', '.join(missing)}", hint)
    echo(f"{what}: installing {', '.join(packages)} with apt-get (one time)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", *packages]
    try:
        run(install, what="apt-get install", hint=hint, env=env, timeout=1800)
    except ServiceError:
        # A fresh machine often has no package lists yet; refresh once and retry.
        run(["apt-get", "update"], what="apt-get update", hint=hint, env=env, timeout=600)
        run(install, what="apt-get install", hint=hint, env=env, timeout=1800)
    still = [tool for tool in tools if shutil.which(tool) is None]
    if still:
        raise ServiceError(f"{what}: apt-get finished but {', '.join(still)} is missing", hint)
