"""Typed errors of capture intake and the capture worker; one class per stable code.

``CaptureError`` is the package's base. Below it: what makes a whole capture
unreadable (``AdapterError``), what makes one product of it unusable
(``ItemProblem``, turned into a rejected item), classified failures of a job or a
product (``Failure``, stored with the job or the product), and refused repairs.
"""

from __future__ import annotations

from typing import ClassVar

from schemas.errors import GaplessError


class CaptureError(GaplessError):
    code = "CAPTURE_ERROR"


# Codes of the ``AdapterError`` classes. Every one is terminal for the bytes it was
# raised on: parsing the same capture again with the same parser version answers the same.
MALFORMED_CAPTURE = "MALFORMED_CAPTURE"  # the bytes are not what the content type says
UNSUPPORTED_CONTENT = "UNSUPPORTED_CONTENT"  # the adapter does not read this media type
MISSING_PART = "MISSING_PART"  # the raw envelope lacks a part the adapter needs
MALFORMED_ENVELOPE = "MALFORMED_ENVELOPE"  # a raw envelope that does not decode
NO_PRODUCTS = "NO_PRODUCTS"  # a product page that states no product at all
UNKNOWN_ADAPTER = "UNKNOWN_ADAPTER"  # no adapter is registered under the name


class AdapterError(CaptureError):
    """A capture as a whole cannot be read. One bad product inside an otherwise good
    capture is not an ``AdapterError`` but an ``ItemProblem`` (a rejected item)."""

    code = "ADAPTER_ERROR"


class MalformedCapture(AdapterError):
    code = MALFORMED_CAPTURE


class UnsupportedContent(AdapterError):
    code = UNSUPPORTED_CONTENT


class NoProducts(AdapterError):
    code = NO_PRODUCTS


class MalformedEnvelope(AdapterError):
    """Raw envelope bytes (or parts) that do not form a valid envelope."""

    code = MALFORMED_ENVELOPE


class MissingPart(AdapterError):
    """The envelope has no part with the role an adapter needs."""

    code = MISSING_PART

    def __init__(self, role: str, present: tuple[str, ...]) -> None:
        have = ", ".join(present) or "none"
        super().__init__(f"the raw envelope has no {role!r} part (parts: {have})")
        self.role = role


class UnknownAdapter(AdapterError):
    code = UNKNOWN_ADAPTER

    def __init__(self, name: str, known: tuple[str, ...]) -> None:
        super().__init__(f"no source adapter is named {name!r}; known: {', '.join(known)}")
        self.name = name


class InvalidInventory(CaptureError):
    """A source-field inventory that is not total, or an exclusion without a real
    reason. Raised when the adapter module is imported, so it never reaches a job."""

    code = "INVALID_INVENTORY"


# --- one product of a capture ---------------------------------------------------------

_MESSAGE_CHARS = 300


class ItemProblem(CaptureError):
    """One product breaks a rule: the adapter records it as a rejected item with this
    code. ``message`` quotes the value, so it is bounded."""

    code = "ITEM_PROBLEM"

    def __init__(self, message: str) -> None:
        if len(message) > _MESSAGE_CHARS:
            message = message[: _MESSAGE_CHARS - 1] + "…"
        super().__init__(message)


class MissingField(ItemProblem):
    code = "MISSING_FIELD"


class InvalidField(ItemProblem):
    code = "INVALID_FIELD"


class InvalidGtin(ItemProblem):
    code = "INVALID_GTIN"


class ConflictingField(ItemProblem):
    code = "CONFLICTING_FIELD"


class DuplicateItem(ItemProblem):
    code = "DUPLICATE_ITEM"


class MultipleOffers(ItemProblem):
    code = "MULTIPLE_OFFERS"


class NotAnObject(ItemProblem):
    code = "NOT_AN_OBJECT"


# --- classified failures of a job or a product -----------------------------------------


class Failure(CaptureError):
    """A classified failure: a stable ``code`` and whether retrying may help."""

    code = "FAILURE"
    retryable: ClassVar[bool] = False


class SourceNotBound(Failure):
    """The capture's (tenant, source) has no binding to a catalog and adapter; an
    operator registers one (``gapless sources register``) and retries the job."""

    code = "SOURCE_NOT_BOUND"


class EvidenceUnavailable(Failure):
    """The object store did not answer within the budget of one put or read (or every
    slot of the concurrency limit stayed busy). At intake nothing was recorded, so
    retrying the same request is safe; in the worker the product or job retries."""

    code = "EVIDENCE_UNAVAILABLE"
    http_status = 503
    retryable = True


class EvidenceRejected(CaptureError):
    """The object store refused the artifact for a reason retrying will not fix."""

    code = "EVIDENCE_REJECTED"
    http_status = 502


class EvidenceMissing(Failure):
    """The capture's artifact is not in the evidence bucket. Flagged, never ignored:
    the capture stays failed until an operator acts."""

    code = "EVIDENCE_MISSING"


class EvidenceCorrupt(Failure):
    """The stored bytes do not hash to the capture's recorded SHA-256."""

    code = "EVIDENCE_CORRUPT"


# --- repairs an operator asks for ------------------------------------------------------


class CaptureRepairError(CaptureError):
    """A retry, skip or replay that does not apply to what it names."""

    code = "CAPTURE_REPAIR_REFUSED"


class JobNotFound(CaptureRepairError):
    code = "JOB_NOT_FOUND"


class ProductNotFound(CaptureRepairError):
    code = "PRODUCT_NOT_FOUND"


class CaptureNotFound(CaptureRepairError):
    code = "CAPTURE_NOT_FOUND"


class NotFailed(CaptureRepairError):
    """Only a failed product or job can be retried."""

    code = "NOT_FAILED"


class ProductNotOpen(CaptureRepairError):
    """Only a failed or retrying product can be skipped."""

    code = "PRODUCT_NOT_OPEN"


class ReasonRequired(CaptureRepairError):
    """A skip is audited: it needs a reason."""

    code = "REASON_REQUIRED"
