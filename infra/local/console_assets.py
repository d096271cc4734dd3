"""htmx, the one script of the console (its tables refreshing in place), fetched from
the npm registry at a pinned version and never committed: ``npm pack`` of
``htmx.org@VERSION`` into ``.local/console-assets/``, whose ``htmx.min.js`` the
console serves (``infra.console.assets``). No Node build step: npm only fetches.

``fetch`` runs in this order:

1. a directory already holding ``htmx.min.js`` with its pinned SHA-256 is left as
   it is (no network: a second run is a no-op);
2. ``npm view`` must give the registry's ``dist.integrity`` of that version equal
   to ``INTEGRITY``, pinned here (a registry that answers otherwise is refused);
3. ``npm pack`` writes the tarball into a fresh temporary directory beside the
   target, and the tarball's own SHA-512 must equal ``INTEGRITY`` too;
4. ``package/dist/htmx.min.js`` (checked against ``SCRIPT_SHA256``) and
   ``package/LICENSE`` are taken out of it, written beside the tarball, and the
   three files renamed into the directory, the script last.

A crash before step 4's last rename leaves no script in the directory (the next run
fetches again) and at most a temporary directory, removed by the next run.

``python -m infra.local.console_assets`` fetches into ``.local/console-assets``
(``make console-assets``, which ``make install``, ``make test`` and ``make demo``
run); ``--into DIR`` elsewhere.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import shutil
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

from infra.local.errors import ServiceError
from infra.local.layout import current_layout
from infra.local.processes import require_tool, run

PACKAGE = "htmx.org"
VERSION = "2.0.11"
INTEGRITY = "sha512-" + (
    "Thx/WtpeOQqSrqBCw/A1cwGJGg4UrVa3+sW0GmrM3p4gJgO89ecH4qtbnyzDDWFvBTqjnIMCgELTNt636dtamA=="
)
"""The registry's ``dist.integrity`` of ``htmx.org@2.0.11``: the tarball's SHA-512."""
SCRIPT = "htmx.min.js"
SCRIPT_SHA256 = "d6fdc75f204e6bdefa99b69bf1e6d4ac69b8a364f77929f45c13476b4000f717"
"""``package/dist/htmx.min.js`` of that tarball."""
LICENSE = "htmx.LICENSE"
DIRECTORY = "console-assets"
"""Its directory under the local state directory (``.local/``)."""
NPM_HINT = "install npm (sudo apt-get install -y npm), which fetches the pinned tarball"

Echo = Callable[[str], None]


def default_directory() -> Path | None:
    """``.local/console-assets`` of this checkout (or of ``GAPLESS_LOCAL_DIR``); None
    where there is no local state directory (an installed package, the image)."""
    try:
        return current_layout().local / DIRECTORY
    except ServiceError:
        return None


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def verified(directory: Path) -> Path | None:
    """The script in ``directory`` if it is there with its pinned SHA-256."""
    script = directory / SCRIPT
    if script.is_file() and _sha256(script) == SCRIPT_SHA256:
        return script
    return None


def integrity_of(data: bytes) -> str:
    """An npm ``integrity`` string (Subresource Integrity, SHA-512) of ``data``."""
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def fetch(directory: Path, echo: Echo) -> Path:
    """Steps 1-4; the path of the verified script."""
    found = verified(directory)
    if found is not None:
        return found
    npm = require_tool("npm", NPM_HINT)
    spec = f"{PACKAGE}@{VERSION}"
    answer = run(
        [npm, "view", spec, "dist.integrity", "--json"],
        what=f"npm view {spec}",
        hint=NPM_HINT,
        timeout=120,
    )
    announced = json.loads(answer or "null")
    if announced != INTEGRITY:
        raise ServiceError(
            f"the registry gives {spec} the integrity {announced!r}, not the pinned {INTEGRITY}",
            "check the npm registry npm is configured with (npm config get registry)",
        )
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob(".fetch-*"):
        shutil.rmtree(stale, ignore_errors=True)
    work = Path(tempfile.mkdtemp(prefix=".fetch-", dir=directory))
    try:
        echo(f"console assets: npm pack {spec} into {directory}")
        run(
            [npm, "pack", spec, "--pack-destination", str(work), "--silent"],
            what=f"npm pack {spec}",
            hint=NPM_HINT,
            timeout=300,
        )
        tarball = work / f"{PACKAGE}-{VERSION}.tgz"
        _extract(tarball, work)
        for name in (tarball.name, LICENSE, SCRIPT):  # the script last: it marks done
            (work / name).replace(directory / name)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    script = verified(directory)
    if script is None:  # _extract checked it; another writer replaced it meanwhile
        raise ServiceError(f"{directory / SCRIPT} changed while it was written", "run again")
    return script


def _extract(tarball: Path, into: Path) -> None:
    """Step 3's check and step 4's extraction: the tarball's SHA-512, then the script
    (its SHA-256) and the licence, read as members (no path from the archive is
    ever written)."""
    data = tarball.read_bytes()
    if integrity_of(data) != INTEGRITY:
        raise ServiceError(
            f"{tarball.name} does not match the pinned integrity {INTEGRITY}",
            "the registry served other bytes than it announced; try again later",
        )
    with tarfile.open(tarball, "r:gz") as archive:
        for member, name in (("package/dist/htmx.min.js", SCRIPT), ("package/LICENSE", LICENSE)):
            source = archive.extractfile(member)
            if source is None:
                raise ServiceError(f"{tarball.name} has no {member}", "check VERSION")
            (into / name).write_bytes(source.read())
    if _sha256(into / SCRIPT) != SCRIPT_SHA256:
        raise ServiceError(
            f"{SCRIPT} of {tarball.name} does not match SCRIPT_SHA256", "check the pins"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description="Fetch htmx for the console, pinned.")
    parser.add_argument("--into", type=Path, default=None, help="default: .local/console-assets")
    args = parser.parse_args()
    directory = args.into or default_directory()
    if directory is None:
        raise SystemExit("no local state directory here: give --into DIR")
    try:
        print(fetch(directory, print))
    except ServiceError as exc:
        raise SystemExit(f"console assets: {exc}") from exc


if __name__ == "__main__":
    main()
