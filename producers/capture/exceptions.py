"""Typed errors of the capture worker; ``code`` is stable and machine-readable."""

from __future__ import annotations


class WorkerError(Exception):
    code = "WORKER_ERROR"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# Codes an ``AdapterError`` carries. Every one is terminal for the bytes it was raised
# on: parsing the same capture again with the same parser version answers the same.
MALFORMED_CAPTURE = "MALFORMED_CAPTURE"  # the bytes are not what the content type says
UNSUPPORTED_CONTENT = "UNSUPPORTED_CONTENT"  # the adapter does not read this media type
MISSING_PART = "MISSING_PART"  # the raw envelope lacks a part the adapter needs
MALFORMED_ENVELOPE = "MALFORMED_ENVELOPE"  # a raw envelope that does not decode
NO_PRODUCTS = "NO_PRODUCTS"  # a product page that states no product at all
UNKNOWN_ADAPTER = "UNKNOWN_ADAPTER"  # no adapter is registered under the name


class AdapterError(WorkerError):
    """A capture as a whole cannot be read. One bad product inside an otherwise good
    capture is not an ``AdapterError`` but a ``RejectedItem`` of the extraction."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class MalformedEnvelope(AdapterError):
    """Raw envelope bytes (or parts) that do not form a valid envelope."""

    def __init__(self, message: str) -> None:
        super().__init__(MALFORMED_ENVELOPE, message)


class MissingPart(AdapterError):
    """The envelope has no part with the role an adapter needs."""

    def __init__(self, role: str, present: tuple[str, ...]) -> None:
        have = ", ".join(present) or "none"
        super().__init__(MISSING_PART, f"the raw envelope has no {role!r} part (parts: {have})")
        self.role = role


class UnknownAdapter(AdapterError):
    def __init__(self, name: str, known: tuple[str, ...]) -> None:
        super().__init__(
            UNKNOWN_ADAPTER, f"no source adapter is named {name!r}; known: {', '.join(known)}"
        )
        self.name = name


class InvalidInventory(WorkerError):
    """A source-field inventory that is not total, or an exclusion without a real
    reason. Raised when the adapter module is imported, so it never reaches a job."""

    code = "INVALID_INVENTORY"
