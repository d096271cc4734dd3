"""podman as this project runs it: installed from Debian's packages when missing, and
configured only through files under ``.local/containers/`` (no system-wide change).

The settings are the ones this kind of host needs: the ``runc`` runtime (crun
refuses a mixed cgroup v1/v2 host), ``cgroupfs`` and a file events logger (no
systemd), and ulimits below the hard limits (podman's defaults exceed them and every
run fails in ``setrlimit``). Images live in the project's own storage (graphroot and
runroot under ``.local/containers/``), so ``rm -rf .local`` removes them too.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from infra.local.debian import ensure_packages
from infra.local.layout import Layout
from infra.local.processes import run

Echo = Callable[[str], None]

PACKAGES = (
    "podman",
    "buildah",
    "skopeo",
    "runc",
    "crun",
    "fuse-overlayfs",
    "slirp4netns",
    "uidmap",
    "containernetworking-plugins",
    "conmon",
    "catatonit",
    "mmdebstrap",
)
TOOLS = ("podman", "runc", "conmon", "mmdebstrap")
"""Executables whose absence means the packages are not installed."""
ULIMITS = ("nofile=20000:20000", "nproc=32768:32768")


def ensure_installed(echo: Echo) -> None:
    """Install the container tools with apt-get if any is missing and we may."""
    ensure_packages(PACKAGES, TOOLS, echo, "container tools")


def config_dir(layout: Layout) -> Path:
    return layout.local / "containers"


def environment(layout: Layout) -> dict[str, str]:
    """The variables that point podman at the project's configuration (written here)."""
    directory = config_dir(layout)
    directory.mkdir(parents=True, exist_ok=True)
    ulimits = ", ".join(f'"{limit}"' for limit in ULIMITS)
    containers_conf = directory / "containers.conf"
    containers_conf.write_text(
        "[containers]\n"
        f"default_ulimits = [{ulimits}]\n"
        "\n[engine]\n"
        'runtime = "runc"\n'
        'cgroup_manager = "cgroupfs"\n'
        'events_logger = "file"\n'
        f'events_logfile_path = "{directory / "events.log"}"\n'
        f'tmp_dir = "{directory / "tmp"}"\n'
    )
    storage_conf = directory / "storage.conf"
    storage_conf.write_text(
        "[storage]\n"
        'driver = "overlay"\n'
        f'graphroot = "{directory / "storage"}"\n'
        f'runroot = "{directory / "run"}"\n'
    )
    return {
        **os.environ,
        "CONTAINERS_CONF": str(containers_conf),
        "CONTAINERS_STORAGE_CONF": str(storage_conf),
        "TMPDIR": str(_tmp(directory)),
    }


def _tmp(directory: Path) -> Path:
    tmp = directory / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    return tmp


def podman(
    layout: Layout,
    args: Sequence[str],
    *,
    what: str,
    timeout: float = 900,
    env: Mapping[str, str] | None = None,
) -> str:
    """Run ``podman ARGS`` with the project's configuration; its stdout."""
    return run(
        ["podman", *args],
        what=what,
        hint=f"see the output above; podman's configuration is in {config_dir(layout)}",
        env={**environment(layout), **(env or {})},
        timeout=timeout,
    )


def succeeds(layout: Layout, args: Sequence[str]) -> bool:
    """True if ``podman ARGS`` exits 0 (``image exists``, ``container exists``)."""
    done = subprocess.run(
        ["podman", *args],
        env=environment(layout),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=False,
        timeout=120,
    )
    return done.returncode == 0
