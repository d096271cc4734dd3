"""A rebuild row to estimate from: loading 20 s, W at 1,000, the live consumer there."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from db.product.rebuilds import RebuildRow
from schemas.ids import StreamId

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def rebuild_row(phase: str, **changes: object) -> RebuildRow:
    row = RebuildRow(
        rebuild_id=uuid.uuid4(),
        consumer="projection",
        stream=StreamId("t1", "c1", 1),
        phase=phase,
        attempt=1,
        shadow_consumer="projection~rebuild",
        generation=2,
        lease_id=uuid.uuid4(),
        export_id=uuid.uuid4(),
        export_position=1000,
        target_position=None,
        chunks_total=10,
        chunks_loaded=0,
        rows_loaded=0,
        requested_by="test",
        reason="",
        error_code=None,
        error_message=None,
        created_at=NOW - timedelta(seconds=60),
        updated_at=NOW,
        finished_at=None,
        caught_up_position=None,
        previous_generation=None,
        cutover_pause_ms=None,
        timings={"exporting": 10.0},
        cleaned_at=None,
        phase_started_at=NOW - timedelta(seconds=20),
        live_position=1000,
    )
    return replace(row, **changes)  # type: ignore[arg-type]
