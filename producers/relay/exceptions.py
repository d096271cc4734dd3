"""Typed relay errors."""

from __future__ import annotations


class RelayError(Exception):
    code = "RELAY_ERROR"


class PublishFailed(RelayError):
    """Kafka did not confirm every message of a batch; the rows stay unpublished."""

    code = "PUBLISH_FAILED"
