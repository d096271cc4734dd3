"""Errors raised by the local service launchers.

Every failure an operator can expect (a missing tool, a port held by someone
else, a service that never became ready) is a `ServiceError`, so the CLI can print
`message` and `hint` instead of a traceback.
"""

from __future__ import annotations

from schemas.errors import GaplessError


class ServiceError(GaplessError):
    """A local service could not be started, stopped or inspected.

    `hint` says what to do about it: what to install, which log to read, which
    environment variable to set.
    """

    code = "LOCAL_SERVICE_FAILED"

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n  hint: {self.hint}" if self.hint else self.message
