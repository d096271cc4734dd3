"""Errors of the storage layer; one class per stable code."""

from __future__ import annotations

from schemas.errors import GaplessError


class EpochChanged(GaplessError):
    """A write prepared for a catalog's first history epoch found another epoch issued
    when it came to commit (an operator fenced it meanwhile). Nothing was written;
    retrying prepares the write for the current epoch."""

    code = "EPOCH_CHANGED"
    http_status = 409
