"""Provisioning: bring the three databases and the Kafka topics to what this code needs.

One public entry point for ``gapless up`` and ``migrate``, the demo, the benchmark and
the test fixtures. Both steps are idempotent, so a crash between them leaves migrated
databases and missing topics that the next run creates.
"""

from __future__ import annotations

from collections.abc import Callable

from db.migrate import upgrade_all
from db.settings import DatabaseSettings
from infra.config import load
from infra.topics import ensure_topics
from schemas.settings import KafkaSettings


def provision(echo: Callable[[str], None]) -> None:
    """1. Apply the Alembic migrations of the resolver, product and control databases.
    2. Create the Kafka topics that are missing."""
    upgrade_all(load(DatabaseSettings), echo)
    ensure_topics(load(KafkaSettings), echo)
