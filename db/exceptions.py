"""Errors of the storage layer; one class per stable code."""

from __future__ import annotations

import uuid

from schemas.errors import GaplessError


class EpochChanged(GaplessError):
    """A write prepared for a catalog's first history epoch found another epoch issued
    when it came to commit (an operator fenced it meanwhile). Nothing was written;
    retrying prepares the write for the current epoch."""

    code = "EPOCH_CHANGED"
    http_status = 409


class StreamFenced(GaplessError):
    """The stream's history epoch was fenced (a newer one was issued after a restore):
    it takes no more writes. Retry: the write goes to the current epoch's stream."""

    code = "STREAM_FENCED"
    http_status = 409

    def __init__(self, message: str, fenced_for_epoch: int) -> None:
        super().__init__(message)
        self.fenced_for_epoch = fenced_for_epoch


class HistoryRewound(GaplessError):
    """The stream's history went back without a fence (a restore of the resolver
    nobody fenced, or a promoted asynchronous replica): it takes no writes until
    ``gapless fence-epoch`` fences it. The message names that exact command."""

    code = "HISTORY_REWOUND"
    http_status = 409


class EpochNotIssued(GaplessError):
    """The epoch to fence is not the catalog's (it has none, or a lower one)."""

    code = "EPOCH_NOT_ISSUED"
    http_status = 409


class StreamPaused(GaplessError):
    """The catalog's processing is paused (a restore in progress, see ``gapless
    status``): nothing was written. Retry after the resume."""

    code = "STREAM_PAUSED"
    http_status = 503

    def __init__(self, message: str, pause_id: uuid.UUID) -> None:
        super().__init__(message, headers={"Retry-After": "5"})
        self.pause_id = pause_id


class RebuildClaimLost(GaplessError):
    """Another worker claims the rebuild now (this worker's claim ran out, or the
    session holding its lock ended): this worker's step stops, committing nothing
    more; the claimant carries on from the last committed phase."""

    code = "REBUILD_CLAIM_LOST"
