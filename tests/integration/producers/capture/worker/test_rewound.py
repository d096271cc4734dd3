"""Capture work on a stream flagged rewound (its history went back without a fence),
against real PostgreSQL, Kafka and S3: the job writes nothing, waits as a paused
catalog's job does (no run failure counted, nothing given up), and goes through at
the new epoch once the catalog is fenced."""

from __future__ import annotations

import psycopg

from db.control.epochs import REPORT_BEYOND_COMMITTED, clear_rewound

from .conftest import Harness, product
from .test_epochs import fence, outbox


def test_a_job_of_a_rewound_stream_waits_for_its_fence_without_spending_its_runs(
    harness: Harness,
) -> None:
    harness.bind()
    harness.activate()  # writes: the catalog's first epoch is issued
    flag = harness.epochs.flag_rewound("t1", "c1", 1, REPORT_BEYOND_COMMITTED, "a test's flag")
    assert flag is not None
    job = harness.capture([product("a")])
    before = outbox(harness)

    report = harness.worker().run(job.job_id)

    assert (report.result, report.error_code) == ("paused", "HISTORY_REWOUND")
    assert outbox(harness) == before
    state = harness.job(job)
    assert (state["status"], state["run_failures"], state["error_code"]) == (
        "retrying",
        0,
        "HISTORY_REWOUND",
    )
    assert "gapless fence-epoch --tenant t1 --catalog c1 --epoch 1" in state["last_error"]

    fence(harness)  # what `gapless fence-epoch` does first, and its flag clearing
    with psycopg.connect(harness.db.control_dsn) as conn:
        assert clear_rewound(conn, "t1", "c1", 2, "operator:test") == 1
        conn.commit()
    harness.make_due()
    assert harness.worker().run(job.job_id).result == "done"
    assert outbox(harness)[1] == before[1] and outbox(harness)[2] == [1, 2, 3]
