"""A service image's tag is a key of everything it is built from: the same inputs give
the same key, a changed byte, name, executable bit or base a new one; its build
context holds every input under its name."""

from __future__ import annotations

import os
from pathlib import Path

from infra.image.service_images import (
    HASHED_BYTES,
    SERVICES,
    SERVICES_DIR,
    Input,
    _context,
    _key,
)
from infra.local.layout import Layout


def _inputs(root: Path) -> list[Input]:
    (root / "libs").mkdir(parents=True)
    (root / "libs" / "a.jar").write_bytes(b"a")
    (root / "libs" / "b.jar").write_bytes(b"b")
    entrypoint = root / "entrypoint.sh"
    entrypoint.write_text("#!/bin/sh\n")
    entrypoint.chmod(0o755)
    return [Input("libs", root / "libs"), Input("entrypoint.sh", entrypoint)]


def test_the_key_follows_every_input_and_the_base(tmp_path: Path) -> None:
    inputs = _inputs(tmp_path)
    key = _key("base-1", inputs)
    assert _key("base-1", inputs) == key
    assert _key("base-2", inputs) != key

    (tmp_path / "libs" / "b.jar").write_bytes(b"B")
    changed = _key("base-1", inputs)
    assert changed != key
    (tmp_path / "entrypoint.sh").chmod(0o644)
    assert _key("base-1", inputs) != changed
    (tmp_path / "libs" / "c.jar").write_bytes(b"")
    assert _key("base-1", inputs) not in (key, changed)


def test_the_context_holds_every_input_under_its_name(tmp_path: Path) -> None:
    layout = Layout(tmp_path / "local", 1, 2, 3, 4)
    context = _context(layout, "kafka", _inputs(tmp_path / "inputs"))
    assert sorted(str(p.relative_to(context)) for p in context.rglob("*") if p.is_file()) == [
        "entrypoint.sh",
        "libs/a.jar",
        "libs/b.jar",
    ]
    assert (context / "entrypoint.sh").stat().st_mode & 0o111


def test_every_service_has_a_containerfile_on_a_base_given_as_a_build_argument() -> None:
    for service in SERVICES:
        text = (SERVICES_DIR / service / "Containerfile").read_text()
        assert "ARG BASE_IMAGE=debian:bookworm-slim\nFROM ${BASE_IMAGE}\n" in text, service


def test_a_large_input_is_keyed_by_its_size_and_modification_time(tmp_path: Path) -> None:
    jar = tmp_path / "big.jar"
    jar.write_bytes(b"x" * (HASHED_BYTES + 1))
    inputs = [Input("big.jar", jar)]
    key = _key("base", inputs)
    os.utime(jar, ns=(1, 1))
    assert _key("base", inputs) != key
