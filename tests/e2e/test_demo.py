"""End to end through real processes: decisions → outbox → relay → Kafka → Faust →
projections.

Runs ``gapless demo`` (relay and agents as separate processes, each killed with -9
once midway) on its own topic and consumer group, against the test databases, with the
resolver's processes logged in as the application login, and through the schema
registry as ``gapless up`` configures it: every event on the topic is in the Confluent
framing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from db.settings import DatabaseSettings
from infra.processes import free_port
from schemas.registry_codec import CONFLUENT_MAGIC
from schemas.settings import KafkaSettings
from tests.fixtures.kafka_reading import topic_values


@pytest.mark.slow
def test_demo_converges_after_crashes(
    clean_db: DatabaseSettings, topic: str, registry_url: str, kafka_settings: KafkaSettings
) -> None:
    env = dict(os.environ)
    env["GAPLESS_SCHEMA_REGISTRY_URL"] = registry_url  # what `gapless up` configures
    env["GAPLESS_EVENTS_TOPIC"] = topic
    env["GAPLESS_AGENTS_APP_ID"] = f"e2e-{uuid.uuid4().hex[:8]}"
    env["GAPLESS_AGENTS_WEB_PORT"] = str(free_port())
    api_port = free_port()
    env["GAPLESS_RESOLVER_API_PORT"] = str(api_port)
    env["GAPLESS_RESOLVER_URL"] = f"http://127.0.0.1:{api_port}"
    done = subprocess.run(
        [sys.executable, "-m", "infra.cli", "demo", "--events", "800", "--tenants", "2", "--json"],
        env=env,
        capture_output=True,
        timeout=600,
    )
    lines = done.stdout.decode().strip().splitlines()
    assert done.returncode == 0, done.stderr.decode()[-3000:] + "\n".join(lines)
    summary = json.loads(lines[0])
    assert lines[-1].startswith("demo: OK")
    assert summary["ok"] is True
    # Every committed event was applied once by the live consumer, or found stale, or
    # covered by the rebuild's load: the live consumer, restarted after its kill -9,
    # can still be behind the export when the cutover moves it past what the export
    # loaded (``loaded_by_rebuild``).
    assert summary["events_applied"] > 0
    assert (
        summary["events_applied"] + summary["ignored_stale"] + summary["loaded_by_rebuild"]
        == summary["events_committed"]
        >= 800
    )
    # Counted from the relay's published positions (the last batch's may still be
    # committing when the applier has caught up).
    assert 0 < summary["events_published"] <= summary["events_committed"]
    assert summary["mismatched_rows"] == 0
    # Every projected aggregate was compared, and the workload was made of decisions of
    # every kind, with the refusals the domain owes it.
    assert set(summary["rows_compared"]) == {
        "catalog_item",
        "listing_mapping",
        "shipping_policy_version",
        "item_split",
        "attribute_definition",
        "attribute_value",
    }
    assert all(n > 0 for n in summary["rows_compared"].values()), summary["rows_compared"]
    assert set(summary["decisions_by_operation"]) == {
        "items",
        "mappings",
        "policy",
        "review",
        "split",
        "retire",
        "attribute_schema",
        "attribute_publish",
        "attributes",
    }
    assert summary["rejected_by_code"].get("STALE_REVISION", 0) > 0
    attribute_codes = {
        "ATTRIBUTE_NOT_PUBLISHED",
        "ATTRIBUTE_VALUE_INVALID",
        "ATTRIBUTE_NOT_APPLICABLE",
    }
    assert attribute_codes & set(summary["rejected_by_code"]), summary["rejected_by_code"]
    assert summary["rolled_back_on_purpose"] > 0
    # The agents reported their progress, so everything they applied could be pruned.
    assert summary["progress_reported"] is True
    assert summary["events_pruned"] == summary["events_committed"]
    # Collectors posted feeds over HTTP; the capture worker (killed once midway)
    # settled every job, its decisions reached the projections with the rest, and a
    # repeated post was answered with the first receipt.
    assert summary["captures_settled"] is True
    assert summary["capture_jobs"].get("done") == summary["captures_posted"] > 0
    assert summary["capture_products"].get("applied", 0) > 0
    assert summary["capture_reposts_answered_with_the_same_receipt"] > 0
    assert summary["events_committed"] == summary["workload_events"] + summary["capture_events"]
    assert summary["failed_checks"] == []
    # Written in the Confluent framing (any Confluent consumer reads it), every event.
    values = topic_values(kafka_settings, topic)
    assert len(values) >= summary["events_published"]
    assert {v[:1] for v in values} == {CONFLUENT_MAGIC}
