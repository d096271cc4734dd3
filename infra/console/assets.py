"""The console's one script: htmx, which refreshes the overview's and the rebuilds'
tables in place. It is never part of the package or the repository:
``infra.local.console_assets`` fetches it at a pinned version into a directory
(``GAPLESS_CONSOLE_ASSETS_DIR``, by default ``.local/console-assets`` of a checkout),
and the console serves it only if it finds it there with its pinned SHA-256.
Without it every page is whole and works; only the refresh in place is missing.
"""

from __future__ import annotations

import logging
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse

from infra.console.settings import ConsoleSettings
from infra.local.console_assets import SCRIPT, VERSION, default_directory, verified

log = logging.getLogger(__name__)

SCRIPT_PATH = f"/assets/htmx-{VERSION}.min.js"
"""Where the pages load it from: the version in the path, so a browser may keep it."""


def find_script(settings: ConsoleSettings) -> Path | None:
    """The verified script, or None (logged: the pages then do without it)."""
    directory = settings.console_assets_dir or default_directory()
    found = verified(directory) if directory is not None else None
    if found is None:
        log.warning(
            "no verified %s in %s (GAPLESS_CONSOLE_ASSETS_DIR; make console-assets fetches"
            " it): the pages work, but their tables do not refresh in place",
            SCRIPT,
            directory,
        )
    return found


def install_script(app: FastAPI, script: Path | None) -> None:
    """Serve ``script`` at ``SCRIPT_PATH`` (nothing when there is none)."""
    if script is None:
        return

    @app.get(SCRIPT_PATH, include_in_schema=False)
    def htmx() -> FileResponse:
        return FileResponse(
            script,
            media_type="text/javascript",
            headers={"Cache-Control": "public, max-age=31536000, immutable"},
        )
