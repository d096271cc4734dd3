"""Typed applier errors."""

from __future__ import annotations


class ApplierError(Exception):
    code = "APPLIER_ERROR"


class EpochNotCurrent(ApplierError):
    """An event names an epoch the control database does not know (or not yet).

    The event is quarantined under this code rather than blocking its partition:
    its stream's progress stops before it until an operator retries it.
    """

    code = "EPOCH_NOT_CURRENT"
