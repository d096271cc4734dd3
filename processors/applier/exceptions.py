"""Typed applier errors."""

from __future__ import annotations


class ApplierError(Exception):
    code = "APPLIER_ERROR"


class EpochHold(ApplierError):
    """An event names an epoch the control database does not (yet) call current.

    Nothing of the batch is written and nothing is acknowledged; the agent retries
    after a pause, so the event waits until the epoch is issued or the batch is
    redelivered.
    """

    code = "EPOCH_NOT_CURRENT"
