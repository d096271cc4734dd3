"""Typed errors of shadow rebuilds; one class per stable code."""

from __future__ import annotations

from schemas.errors import GaplessError


class RebuildError(GaplessError):
    code = "REBUILD_ERROR"


class RebuildNotFound(RebuildError):
    code = "REBUILD_NOT_FOUND"


class WrongPhase(RebuildError):
    """The rebuild is not in the phase this step belongs to (another worker moved it
    on, or it was cancelled or failed meanwhile)."""

    code = "REBUILD_WRONG_PHASE"


class ExportMismatch(RebuildError):
    """An export record that is not of the rebuild's stream or not at its position W."""

    code = "EXPORT_MISMATCH"


class EpochNotCurrentForRebuild(RebuildError):
    """The stream being rebuilt is no longer its catalog's current history (a restore
    issued a new epoch): its generation must not serve."""

    code = "REBUILD_EPOCH_NOT_CURRENT"
