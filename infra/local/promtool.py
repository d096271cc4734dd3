"""``promtool``, Prometheus's rule checker, from Debian's ``prometheus`` package
(installed when missing; its service is not started): the test suite checks the alert
rules with ``promtool check rules`` and runs their unit tests with ``promtool test
rules`` (``infra/deploy/prometheus/alerts_test.yaml``).

``python -m infra.local.promtool`` installs it (the Makefile's ``make test`` does).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable

from infra.local.debian import ensure_packages
from infra.local.errors import ServiceError

PACKAGES = ("prometheus",)
TOOL = "promtool"


def ensure(echo: Callable[[str], None]) -> str:
    """The path of ``promtool``, installed first if it is missing."""
    ensure_packages(PACKAGES, (TOOL,), echo, "alert tools")
    found = shutil.which(TOOL)
    if found is None:  # ensure_packages raises first; this keeps the type honest
        raise ServiceError(f"{TOOL} not found", "sudo apt-get install -y prometheus")
    return found


def main() -> None:
    print(ensure(print))


if __name__ == "__main__":
    main()
