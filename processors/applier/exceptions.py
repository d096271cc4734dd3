"""Typed applier errors; one class per stable code."""

from __future__ import annotations

from schemas.errors import GaplessError


class ApplierError(GaplessError):
    code = "APPLIER_ERROR"


class EpochUnknown(ApplierError):
    """An event names an epoch the control database does not know (or not yet).

    The event is quarantined under this code rather than blocking its partition:
    its stream's progress stops before it until an operator retries it. (Quarantine
    rows written before 2026-12 said ``EPOCH_NOT_CURRENT``; migration product_0006
    renamed them.)
    """

    code = "EPOCH_UNKNOWN"


class QuarantineRepairError(ApplierError):
    """A retry or skip of a quarantine entry that does not apply."""

    code = "QUARANTINE_REPAIR_REFUSED"


class EntryNotFound(QuarantineRepairError):
    code = "QUARANTINE_ENTRY_NOT_FOUND"


class EntryNotOpen(QuarantineRepairError):
    """The entry was already retried or skipped."""

    code = "QUARANTINE_ENTRY_NOT_OPEN"


class SkipReasonRequired(QuarantineRepairError):
    """A skip is audited: it needs a reason."""

    code = "SKIP_REASON_REQUIRED"


class ParkedRepairError(ApplierError):
    """A retry or skip of a parked event that does not apply."""

    code = "PARKED_REPAIR_REFUSED"


class ParkedEventNotFound(ParkedRepairError):
    """No parked event has that id (it may have been released or set aside)."""

    code = "PARKED_EVENT_NOT_FOUND"


class ShadowProgressLost(ApplierError):
    """A rebuild's shadow found its progress row missing, or in another generation
    than the one it is bound to: its rebuild was restarted, cancelled or cleaned up
    meanwhile. Nothing of the batch is written (a shadow never makes its own row, so
    it can never write into the generation that serves); the rebuild starts over."""

    code = "SHADOW_PROGRESS_LOST"
