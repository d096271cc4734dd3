"""Chromium and its WebDriver from Debian's packages (``chromium``,
``chromium-driver``), installed when missing: the console's browser tests
(``tests/e2e/test_console_browser.py``) drive that executable headless through
Selenium, pointed at these two paths (never a browser Selenium would fetch itself).

``python -m infra.local.browser`` installs them (the Makefile's ``make test`` does).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from infra.local.debian import ensure_packages, install_hint
from infra.local.errors import ServiceError

PACKAGES = ("chromium", "chromium-driver")
TOOLS = ("chromium", "chromedriver")
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


@dataclass(frozen=True, slots=True)
class Browser:
    """Where the browser and its driver are."""

    chromium: Path
    chromedriver: Path


def ensure(echo: Callable[[str], None]) -> Browser:
    """Chromium and chromedriver at Debian's paths, installed first if missing."""
    ensure_packages(PACKAGES, TOOLS, echo, "browser tools")
    for path in (CHROMIUM, CHROMEDRIVER):
        if not path.is_file():  # on the PATH elsewhere: not Debian's package
            raise ServiceError(f"browser tools: {path} is missing", install_hint(PACKAGES))
    return Browser(CHROMIUM, CHROMEDRIVER)


def main() -> None:
    found = ensure(print)
    print(found.chromium)
    print(found.chromedriver)


if __name__ == "__main__":
    main()
