"""``make image``: the base from Debian's packages, then the gapless image on it.

1. the container tools, installed from Debian's packages when missing
   (``infra.image.podman``);
2. the base image ``localhost/gapless-base:bookworm``, unless the project's storage
   holds it already: ``mmdebstrap`` writes a minimal bookworm with Python 3.11 (from
   the mirrors this host's apt uses, read from
   ``/etc/apt/sources.list.d/debian.sources``, never a hard-coded one) as a tarball,
   and ``podman import`` makes it an image;
3. ``podman build`` of ``infra/Containerfile`` on that base, from a build context of
   the package's files only (pyproject, README and the five packages) and the
   console's pinned htmx (``infra.local.console_assets``, fetched when missing, put
   in the context's ``infra/console/vendor/``, which the Containerfile copies to
   ``/opt/gapless/console-assets``; without npm here the image is built without it
   and says so), with the host's CA bundle as a build secret so pip reaches PyPI
   through this host's proxy and nothing of the bundle stays in the image. podman's
   layer cache makes a second build with the same files a matter of seconds.

A crash between steps leaves at most a tarball or an unfinished context under
``.local/image/``, both rewritten by the next run; an image is only tagged once
complete.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from infra.image.podman import ensure_installed, podman, succeeds
from infra.local import console_assets
from infra.local.errors import ServiceError
from infra.local.layout import INFRA_DIR, Layout
from infra.local.processes import run

Echo = Callable[[str], None]

BASE_IMAGE = "localhost/gapless-base:bookworm"
IMAGE = "localhost/gapless:latest"
SUITE = "bookworm"
SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
CONTAINERFILE = INFRA_DIR / "Containerfile"
REPO = INFRA_DIR.parent
CONTEXT = ("pyproject.toml", "README.md", "schemas", "db", "producers", "processors", "infra")
"""What the build context holds: the package and its metadata, nothing of ``.local``."""
VENDOR = "infra/console/vendor"
"""Where the context carries the console's htmx (in the context only, never the repo)."""
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
EXCLUDED = (
    "/usr/share/doc/*",
    "/usr/share/man/*",
    "/usr/share/info/*",
    "/usr/share/locale/*",
    "/usr/share/lintian/*",
)


def build(layout: Layout, echo: Echo, *, rebuild_base: bool = False) -> str:
    """Steps 1-3; returns the image's name."""
    ensure_installed(echo)
    if rebuild_base or not succeeds(layout, ["image", "exists", BASE_IMAGE]):
        build_base(layout, echo)
    else:
        echo(f"image: reusing the base {BASE_IMAGE}")
    context = _context(layout)
    _console_assets(layout, context, echo)
    echo(f"image: building {IMAGE} from {CONTAINERFILE.relative_to(REPO)}")
    args = [
        "build",
        "--network",
        "host",
        "--layers",
        "--build-arg",
        f"BASE_IMAGE={BASE_IMAGE}",
        "--file",
        str(CONTAINERFILE),
        "--tag",
        IMAGE,
    ]
    if CA_BUNDLE.is_file():
        args += ["--secret", f"id=pipca,src={CA_BUNDLE}"]
    podman(layout, [*args, str(context)], what="podman build", timeout=1800)
    echo(f"image: {IMAGE} built")
    return IMAGE


def mirrors(sources: Path = SOURCES) -> list[str]:
    """One ``deb URI SUITE COMPONENTS`` line per suite this host's apt reads, from the
    deb822 stanzas of ``sources``."""
    try:
        text = sources.read_text()
    except OSError as exc:
        raise ServiceError(
            f"cannot read {sources} for the Debian mirrors",
            "build on a Debian host, or build elsewhere with "
            "--build-arg BASE_IMAGE=python:3.11-slim-bookworm",
        ) from exc
    lines: list[str] = []
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line:
                continue
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        if "deb" not in fields.get("types", "").split():
            continue
        for uri in fields.get("uris", "").split():
            for suite in fields.get("suites", "").split():
                if suite.split("-")[0] == SUITE:
                    lines.append(f"deb {uri} {suite} {fields.get('components', 'main')}")
    if not lines:
        raise ServiceError(f"no {SUITE} mirror found in {sources}", "add a deb822 stanza")
    return lines


def build_base(layout: Layout, echo: Echo) -> None:
    """Step 2: mmdebstrap a minimal bookworm with Python, then ``podman import`` it."""
    directory = layout.local / "image"
    directory.mkdir(parents=True, exist_ok=True)
    tarball = directory / "base.tar"
    echo(f"image: building the base {BASE_IMAGE} with mmdebstrap (one time, about a minute)")
    run(
        [
            "mmdebstrap",
            "--variant=minbase",
            "--include=python3,python3-venv,ca-certificates",
            *(f"--dpkgopt=path-exclude={path}" for path in EXCLUDED),
            "--dpkgopt=path-include=/usr/share/doc/*/copyright",
            SUITE,
            str(tarball),
            *mirrors(),
        ],
        what="mmdebstrap",
        hint="see the output above (the mirrors come from " + str(SOURCES) + ")",
        timeout=1200,
    )
    podman(
        layout,
        ["import", "--change", "ENV LANG=C.UTF-8", str(tarball), BASE_IMAGE],
        what="podman import",
    )
    tarball.unlink()


def _context(layout: Layout) -> Path:
    """A build context holding the package's files as git sees them (tracked, or new and
    not ignored), so nothing of ``.local``, ``.venv`` or caches goes into the build."""
    context = layout.local / "image" / "context"
    if context.exists():
        shutil.rmtree(context)
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", "--", *CONTEXT],
        cwd=REPO,
        capture_output=True,
        check=False,
    )
    if listed.returncode != 0:
        raise ServiceError(
            f"git ls-files failed in {REPO}: {listed.stderr.decode(errors='replace')}",
            "build from a git checkout of gapless",
        )
    for name in listed.stdout.decode().split("\0"):
        source = REPO / name
        if not name or not source.is_file():
            continue  # deleted in the working tree
        target = context / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    return context


def _console_assets(layout: Layout, context: Path, echo: Echo) -> None:
    """The console's htmx into the context (step 3), or a word that the image goes
    without it (its console then serves whole pages, reloaded by hand)."""
    try:
        script = console_assets.fetch(layout.local / console_assets.DIRECTORY, echo)
    except ServiceError as exc:
        echo(f"image: built without the console's htmx ({exc})")
        return
    target = context / VENDOR
    target.mkdir(parents=True, exist_ok=True)
    for name in (console_assets.SCRIPT, console_assets.LICENSE):
        shutil.copy2(script.parent / name, target / name)
