"""The base image's mirrors come from the host's deb822 sources, never a default; a
container gets the GAPLESS_ variables by name only, never their values on argv."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.image.build import mirrors
from infra.image.containers import Contained
from infra.local.errors import ServiceError
from infra.local.layout import Layout

SOURCES = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main contrib
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://mirror.example/debian
Suites: bookworm
Components: main

Types: deb
URIs: http://security.example/debian-security
Suites: bookworm-security
Components: main
"""


def test_every_bookworm_suite_of_the_host_sources_becomes_a_deb_line(tmp_path: Path) -> None:
    sources = tmp_path / "debian.sources"
    sources.write_text(SOURCES)
    assert mirrors(sources) == [
        "deb http://mirror.example/debian bookworm main contrib",
        "deb http://mirror.example/debian bookworm-updates main contrib",
        "deb http://security.example/debian-security bookworm-security main",
    ]


def test_no_sources_is_an_error_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(ServiceError, match=r"debian\.sources"):
        mirrors(tmp_path / "debian.sources")


def test_a_container_gets_gapless_variables_by_name_and_no_local_ones(tmp_path: Path) -> None:
    layout = Layout(tmp_path, 1, 2, 3, 4)
    env = {
        "GAPLESS_RESOLVER_TOKEN": "secret-token",
        "GAPLESS_COLLECTOR_JWT_PUBLIC_KEY": "-----BEGIN\nKEY\n-----END",
        "GAPLESS_LOCAL_DIR": "/host/only",
        "HOME": "/root",
    }
    process = Contained("relay", ["relay"], env, tmp_path / "relay.log", image="img", layout=layout)
    process.container = "gapless-relay-test"
    command, child_env = process.command()
    assert command[:2] == ["podman", "run"]
    assert command[-2:] == ["img", "relay"]
    passed = [command[i + 1] for i, arg in enumerate(command) if arg == "--env"]
    assert passed == ["GAPLESS_COLLECTOR_JWT_PUBLIC_KEY", "GAPLESS_RESOLVER_TOKEN"]
    assert not any("secret-token" in arg for arg in command)
    assert child_env["GAPLESS_RESOLVER_TOKEN"] == "secret-token"
    assert child_env["CONTAINERS_CONF"].startswith(str(tmp_path))
    assert "--network" in command and command[command.index("--network") + 1] == "host"
