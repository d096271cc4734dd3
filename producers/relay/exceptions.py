"""Typed relay errors; one class per stable code."""

from __future__ import annotations

from schemas.errors import GaplessError


class RelayError(GaplessError):
    code = "RELAY_ERROR"


class PublishFailed(RelayError):
    """Kafka did not confirm every message of a batch; the published position stays put."""

    code = "PUBLISH_FAILED"


class OutboxGap(RelayError):
    """A stream's rows above its published position are not contiguous.

    Writers commit positions gapless and in order, and only published rows are ever
    deleted, so this means rows were removed by hand. The relay publishes nothing of
    the stream rather than mark positions Kafka never received.
    """

    code = "OUTBOX_GAP"
