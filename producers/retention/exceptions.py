"""Typed retention-control errors; ``code`` is stable and machine-readable and
``http_status`` is what the API answers with."""

from __future__ import annotations

from schemas.errors import GaplessError


class RetentionError(GaplessError):
    code = "RETENTION_ERROR"
    http_status = 409


class TtlTooLong(RetentionError):
    """A lease asked for a longer TTL than ``GAPLESS_LEASE_MAX_TTL_SECONDS`` allows."""

    code = "TTL_TOO_LONG"
    http_status = 422


class IncompleteCursor(RetentionError):
    """A stream listing's ``after_*`` parameters name only part of a stream."""

    code = "INCOMPLETE_CURSOR"
    http_status = 422


class StreamNotFound(RetentionError):
    code = "STREAM_NOT_FOUND"
    http_status = 404


class ConsumerNotFound(RetentionError):
    code = "CONSUMER_NOT_FOUND"
    http_status = 404


class LeaseNotFound(RetentionError):
    code = "LEASE_NOT_FOUND"
    http_status = 404


class PositionBeyondCommitted(RetentionError):
    """A reported position or lease pin above the stream's committed cursor: it would
    let the pruner pass events the reporter cannot have seen."""

    code = "POSITION_BEYOND_COMMITTED"
    http_status = 409


class ConsumerNeedsRebuild(RetentionError):
    """A consumer's first report fell below pruned-through: the events it still needs
    are gone, so it must be rebuilt (or deregistered). Recorded on its row."""

    code = "CONSUMER_NEEDS_REBUILD"
    http_status = 409


class LeaseEpochMismatch(RetentionError):
    """The request names another history epoch than the lease's stream."""

    code = "LEASE_EPOCH_MISMATCH"
    http_status = 409


class Gone(RetentionError):
    """The events asked for are no longer guaranteed: start over (a rebuild restarts
    from a new export, a consumer from a snapshot)."""

    code = "GONE"
    http_status = 410


class CursorPruned(Gone):
    code = "CURSOR_PRUNED"


class LeaseExpired(Gone):
    """An expired lease is never revived; the rebuild takes a new one."""

    code = "LEASE_EXPIRED"


class LeaseReleased(Gone):
    code = "LEASE_RELEASED"


class EpochNotCurrent(Gone):
    code = "EPOCH_NOT_CURRENT"
