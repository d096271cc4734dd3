"""Images of the services, for the test fixtures' containers provider, built here from
what the local services already run and never pulled:

- ``postgres``: PostgreSQL 15 from Debian's packages on the base image;
- ``kafka``: the jars ``infra/local/kafka.py`` resolves from Maven Central
  (``infra/kafka/pom.xml``) on Debian's Java 17 runtime, KRaft formatted at start;
- ``s3``: the versitygw binary ``go install`` built for the local service, copied in;
- ``registry``: Apicurio Registry, the application ``infra/local/registry.py`` fetches
  from Maven Central, on the Java 21+ runtime that launcher finds (Debian bookworm
  packages no Java 21), both copied in.

Their Containerfiles are under ``infra/image/services/<name>/``. Each image is tagged
with a key of everything it is built from (the files of its Containerfile's
directory, the inputs copied in, the base image's id; see ``_key``):
``localhost/gapless-<name>:<key>``.
A tag that exists is reused without a build, so a second run costs one ``image
inspect`` per image, and a change to any input builds a new image.

With podman (here), the build goes through ``infra.image.podman`` on the base
``infra.image.build`` makes from Debian's packages. With a Docker engine, the same
Containerfiles build with ``docker build`` on ``debian:bookworm-slim`` (the base as a
build argument, as for the application image).

1. the container tools and the base image (podman: installed / built when missing);
2. per image: its inputs (resolving the Kafka jars and building versitygw first when
   missing), their key, and unless that tag exists: a build context assembled under
   ``.local/image/services/<name>/`` and the build, which sets the tag.

A crash in step 2 leaves a half-assembled context, rewritten by the next run; a tag
only exists once its build completed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from infra.image.build import BASE_IMAGE, build_base
from infra.image.podman import ensure_installed, podman, succeeds
from infra.local import kafka, registry, s3
from infra.local.layout import INFRA_DIR, Layout
from infra.local.processes import run

Echo = Callable[[str], None]
Engine = Literal["podman", "docker"]

SERVICES_DIR = INFRA_DIR / "image" / "services"
SERVICES = ("postgres", "kafka", "s3", "registry")
HASHED_BYTES = 1 << 20
DOCKER_BASE = "debian:bookworm-slim"
"""The base a Docker engine builds on (the same bookworm the podman base is)."""


@dataclass(frozen=True)
class Input:
    """A file or directory copied into an image's build context as ``name``."""

    name: str
    source: Path


def repository(service: str) -> str:
    return f"localhost/gapless-{service}"


def build(layout: Layout, echo: Echo, engine: Engine = "podman") -> dict[str, str]:
    """Steps 1-2; the image of each service, by service name."""
    base, base_key = _base(layout, echo, engine)
    images: dict[str, str] = {}
    for service in SERVICES:
        inputs = [
            *(Input(path.name, path) for path in sorted((SERVICES_DIR / service).iterdir())),
            *_extra_inputs(service, layout, echo),
        ]
        image = f"{repository(service)}:{_key(base_key, inputs)}"
        if _exists(layout, engine, image):
            echo(f"images: reusing {image}")
        else:
            echo(f"images: building {image}")
            _build_image(layout, engine, image, _context(layout, service, inputs), base)
        images[service] = image
    return images


def _base(layout: Layout, echo: Echo, engine: Engine) -> tuple[str, str]:
    """The base image's name and what identifies its content (podman: its id)."""
    if engine == "docker":
        return DOCKER_BASE, DOCKER_BASE
    ensure_installed(echo)
    if not succeeds(layout, ["image", "exists", BASE_IMAGE]):
        build_base(layout, echo)
    inspect = ["image", "inspect", "--format", "{{.Id}}", BASE_IMAGE]
    return BASE_IMAGE, podman(layout, inspect, what="podman image inspect").strip()


def _extra_inputs(service: str, layout: Layout, echo: Echo) -> list[Input]:
    if service == "kafka":
        return [
            Input("libs", kafka.resolved_libs(layout, echo)),
            Input("log4j2.properties", kafka.LOG4J_CONFIG),
        ]
    if service == "s3":
        return [Input("versitygw", s3.built_binary(layout, echo))]
    if service == "registry":
        return [
            Input("app", registry.unpacked(layout, echo)),
            Input("jdk", registry.java_home()),
        ]
    return []


def _files(source: Path) -> Iterator[tuple[str, Path]]:
    """Every file under ``source`` (or ``source`` itself), relative name first, sorted."""
    if source.is_file():
        yield "", source
        return
    for path in sorted(source.rglob("*")):
        if path.is_file():
            yield str(path.relative_to(source)), path


def _key(base_key: str, inputs: list[Input]) -> str:
    """What the image is built from, hashed: the base, every input's names, whether
    it is executable (the entry points must stay so), and its bytes; a file over
    ``HASHED_BYTES`` (a jar, the JDK's, a binary) by its size and modification time
    instead, which resolving or building it again changes."""
    digest = hashlib.sha256(base_key.encode())
    for item in inputs:
        for name, path in _files(item.source):
            stat = path.stat()
            digest.update(f"\0{item.name}/{name}\0{os.access(path, os.X_OK)}\0".encode())
            if stat.st_size > HASHED_BYTES:
                digest.update(f"{stat.st_size}:{stat.st_mtime_ns}".encode())
                continue
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _context(layout: Layout, service: str, inputs: list[Input]) -> Path:
    """The build context: every input hard-linked (copied across filesystems)."""
    context = layout.local / "image" / "services" / service
    if context.exists():
        shutil.rmtree(context)
    context.mkdir(parents=True)
    for item in inputs:
        for name, source in _files(item.source):
            target = context / item.name / name if name else context / item.name
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(source, target)
            except OSError:
                shutil.copy2(source, target)
    return context


def _exists(layout: Layout, engine: Engine, image: str) -> bool:
    if engine == "podman":
        return succeeds(layout, ["image", "exists", image])
    done = subprocess.run(
        ["docker", "image", "inspect", image], capture_output=True, check=False, timeout=120
    )
    return done.returncode == 0


def _build_image(layout: Layout, engine: Engine, image: str, context: Path, base: str) -> None:
    options = [
        "--network", "host",
        "--build-arg", f"BASE_IMAGE={base}",
        "--file", str(context / "Containerfile"),
        "--tag", image,
    ]  # fmt: skip
    if engine == "podman":
        args = ["build", "--layers", *options, str(context)]
        podman(layout, args, what=f"podman build of {image}", timeout=1800)
    else:
        args = ["docker", "build", *options, str(context)]
        run(args, what=f"docker build of {image}", hint="see the output above", timeout=1800)
