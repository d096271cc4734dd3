"""Schemathesis against the OpenAPI schema of the intake routes: generated requests
(valid and invalid, with a registered collector's token) never get a 5xx, and every
answer matches the documented status codes and bodies.

The operations are driven as Hypothesis strategies from inside an ordinary test, so
the run uses this suite's fixtures (real PostgreSQL, S3 and Kafka) and stays bounded
(``max_examples`` per operation and mode; about 20 s in all).
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import (
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.generation import GenerationMode

from db.settings import DatabaseSettings
from producers.api import create_app
from producers.settings import ApiSettings

from .conftest import CollectorKey, bearer, register

OPERATIONS = [("/v1/captures", "POST"), ("/v1/receipts/{receipt_id}", "GET")]


def _plausible(case: Any) -> Any:
    """Half the valid capture bodies get an accepted media type, an http URL and a
    base64 artifact, so the run also reaches the evidence put, the transaction and
    the replay path (generated strings almost never are any of these)."""
    body = case.body
    if isinstance(body, dict) and len(str(body.get("source_url", ""))) % 2 == 0:
        body["content_type"] = "application/json"
        body["source_url"] = "https://shop.example/item"
        body["artifact"] = base64.b64encode(str(body.get("artifact", "")).encode()).decode()
    return case


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
@pytest.mark.parametrize(("path", "method"), OPERATIONS)
def test_generated_requests_get_no_server_error(
    api_settings: ApiSettings,
    clean_db: DatabaseSettings,
    collector_key: CollectorKey,
    path: str,
    method: str,
    mode: GenerationMode,
) -> None:
    register(clean_db, "schemathesis", "t1", "shop", "fuzz")
    headers = bearer(collector_key.token("schemathesis"))
    app = create_app(api_settings)
    with TestClient(app):  # runs the lifespan: the pool is open while the cases run
        schema = schemathesis.openapi.from_asgi("/openapi.json", app)
        operation = schema[path][method]

        strategy = operation.as_strategy(generation_mode=mode)
        if mode is GenerationMode.POSITIVE:
            strategy = strategy.map(_plausible)

        @given(case=strategy)
        @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
        def check(case: Any) -> None:
            response = case.call(headers=headers)
            case.validate_response(
                response,
                checks=[not_a_server_error, status_code_conformance, response_schema_conformance],
            )

        check()
