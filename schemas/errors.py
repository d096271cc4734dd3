"""The base of every error gapless raises on purpose.

Each subclass carries one stable, machine-readable ``code`` (safe to branch on, count
in metrics, store with a failed item or a quarantined message, and document); no two
classes share a code (``tests/unit/test_error_codes.py`` holds that). ``http_status``
is what an HTTP API answers with when the error reaches it; ``None`` for errors that
never should (they become a 500). ``message`` is for people.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar


class GaplessError(Exception):
    code: ClassVar[str] = "ERROR"
    http_status: ClassVar[int | None] = None

    def __init__(self, message: str, *, headers: Mapping[str, str] | None = None) -> None:
        # The message alone goes to ``args``, so the error pickles and crosses process
        # boundaries intact (subclasses with other arguments keep their own).
        super().__init__(message)
        self.message = message
        self.headers = dict(headers or {})
