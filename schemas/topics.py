"""Kafka topic names: the contract producers and processors share.

Where the broker is, and the events topic's layout, are settings
(``schemas.settings.KafkaSettings``).
"""

from __future__ import annotations

EVENTS_TOPIC = "catalog.events.v1"
CONTROL_TOPIC = "catalog.control.v1"
REBUILD_STATUS_TOPIC = "catalog.rebuild-status.v1"
JOBS_TOPIC = "intake.jobs.v1"
