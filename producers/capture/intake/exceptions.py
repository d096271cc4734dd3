"""Typed intake errors; ``code`` is stable and machine-readable and ``http_status``
is what the API answers with. (An evidence put that fails for a while is the
package's ``EvidenceUnavailable``, the same failure the worker meets reading.)"""

from __future__ import annotations

from producers.capture.exceptions import CaptureError


class IntakeError(CaptureError):
    code = "INTAKE_ERROR"
    http_status = 400


class IdempotencyKeyReused(IntakeError):
    """The instance already used this idempotency key for a different request."""

    code = "IDEMPOTENCY_KEY_REUSED"
    http_status = 409


class PayloadTooLarge(IntakeError):
    code = "PAYLOAD_TOO_LARGE"
    http_status = 413


class UnsupportedMediaType(IntakeError):
    code = "UNSUPPORTED_MEDIA_TYPE"
    http_status = 415


class MalformedRawEnvelope(IntakeError):
    """An artifact posted as a raw envelope that does not decode as one."""

    code = "MALFORMED_RAW_ENVELOPE"
    http_status = 422


class ReceiptNotFound(IntakeError):
    code = "NOT_FOUND"
    http_status = 404


class InstanceScopeDenied(IntakeError):
    """The receipt belongs to another collector instance (of the caller's tenant)."""

    code = "INSTANCE_SCOPE_DENIED"
    http_status = 403


class CollectorRegistryError(IntakeError):
    """An operator's credential command conflicts with what is registered."""

    code = "COLLECTOR_REGISTRY_CONFLICT"
    http_status = 409


class CollectorKeysUnavailable(IntakeError):
    """The issuer's key set (JWKS) cannot be fetched, so no token can be checked."""

    code = "UNAVAILABLE"
    http_status = 503
