"""The console's htmx is taken only with its pinned hashes: a tarball that is not the
pinned one is refused before anything of it is written, a script that is not the
pinned one is not served, and the console finds none where none was fetched."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
from pydantic import SecretStr

from infra.console.assets import find_script
from infra.console.settings import ConsoleSettings
from infra.local import console_assets
from infra.local.errors import ServiceError
from schemas.http.auth import token_hash


def test_integrity_is_npms_sha512_in_base64() -> None:
    # The SHA-512 of nothing, as Subresource Integrity writes it.
    assert console_assets.integrity_of(b"") == (
        "sha512-z4PhNX7vuL3xVChQ1m2AB9Yg5AULVxXcg/SpIdNs6c5H0NE8XYXysP+DGNKHfuwvY7kxvUdBeoGlODJ6+SfaPg=="
    )
    assert console_assets.INTEGRITY.startswith("sha512-") and len(console_assets.INTEGRITY) == 95


def _tarball(path: Path, script: bytes) -> Path:
    """A package tarball shaped like htmx.org's, with ``script`` as its min.js."""
    with tarfile.open(path, "w:gz") as archive:
        for name, data in (("package/dist/htmx.min.js", script), ("package/LICENSE", b"0BSD")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_a_tarball_other_than_the_pinned_one_is_refused_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    tarball = _tarball(tmp_path / "htmx.org-2.0.11.tgz", b"alert('not htmx')")
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(ServiceError, match="pinned integrity"):
        console_assets._extract(tarball, out)
    assert list(out.iterdir()) == []


def test_a_script_without_its_pinned_hash_is_not_served(tmp_path: Path) -> None:
    assert console_assets.verified(tmp_path) is None  # none there
    (tmp_path / console_assets.SCRIPT).write_text("alert('not htmx')")
    assert console_assets.verified(tmp_path) is None
    settings = ConsoleSettings(
        api_tokens=SecretStr(f"{token_hash('t')}:*=viewer"), console_assets_dir=tmp_path
    )
    assert find_script(settings) is None
