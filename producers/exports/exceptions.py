"""Typed snapshot export errors; ``code`` is stable, ``http_status`` what the API answers."""

from __future__ import annotations

from schemas.errors import GaplessError


class ExportError(GaplessError):
    code = "EXPORT_ERROR"
    http_status = 409


class ExportNotFound(ExportError):
    code = "EXPORT_NOT_FOUND"
    http_status = 404


class ExportStoreUnavailable(ExportError):
    """The exports bucket did not take or give an object within the attempt budget."""

    code = "EXPORT_STORE_UNAVAILABLE"
    http_status = 503


class ExportEpochChanged(ExportError):
    """The stream's history epoch changed while its snapshot was written."""

    code = "EXPORT_EPOCH_CHANGED"


class ExportAbandoned(ExportError):
    """The export stopped being ``writing`` under its writer (marked failed or
    abandoned by retention)."""

    code = "EXPORT_ABANDONED"


class ExportSpoolFailed(ExportError):
    """The export's spool file (``GAPLESS_EXPORT_SPOOL_DIR``) could not be written or
    read back: the directory is full, gone or not writable, or the file changed."""

    code = "EXPORT_SPOOL_FAILED"
    http_status = 503
