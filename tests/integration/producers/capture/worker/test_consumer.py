"""The worker's loop against the real jobs topic: messages run their jobs, an enqueue
gap is closed by the sweeper, a lost message by the repair scan, and the process
stops cleanly on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from psycopg_pool import ConnectionPool

from infra.processes import free_port
from producers.capture.intake.captures import IntakeService
from producers.capture.intake.enqueue import JobEnqueuer
from producers.capture.intake.sweeper import Sweeper
from producers.capture.settings import IntakeSettings, SweeperSettings
from producers.capture.worker.consumer import JobLoop, due_job_ids, job_consumer
from producers.capture.worker.pipeline import CaptureWorker

from .conftest import Harness, Job, product


@contextmanager
def running_loop(harness: Harness, orphaned_after: float = 3600) -> Iterator[JobLoop]:
    worker = harness.worker()
    loop = JobLoop(
        worker.run,
        job_consumer(
            harness.settings.kafka_bootstrap,
            f"test-worker-{harness.settings.jobs_topic}",
            harness.settings.jobs_topic,
            "test-worker",
        ),
        lambda: due_job_ids(harness.pool, CaptureWorker.KINDS, orphaned_after, 10, 5),
        concurrency=2,
        scan_interval_seconds=0.5,
    )
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=(stop,))
    thread.start()
    try:
        yield loop
    finally:
        stop.set()
        thread.join(30)
        assert not thread.is_alive()


def wait_for(condition: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def done(harness: Harness, *jobs: Job) -> Callable[[], bool]:
    return lambda: all(harness.job(j)["status"] == "done" for j in jobs)


def test_job_messages_run_their_jobs(harness: Harness) -> None:
    harness.bind()
    harness.activate()
    jobs = [harness.capture([product(f"m{n}")]) for n in range(3)]
    assert {harness.job(j)["status"] for j in jobs} == {"enqueued"}
    with running_loop(harness):
        wait_for(done(harness, *jobs))
    assert all(harness.results(j)[f"m{n}"][0] == "applied" for n, j in enumerate(jobs))


def test_an_enqueue_gap_is_closed_by_the_sweeper_then_the_worker(harness: Harness) -> None:
    harness.bind()
    harness.activate()
    settings = IntakeSettings(
        jobs_topic=harness.settings.jobs_topic,
        kafka_bootstrap="127.0.0.1:9",  # nothing listens: the enqueue after commit fails
        enqueue_timeout_seconds=0.5,
    )
    broken = JobEnqueuer(settings.kafka_bootstrap, settings.jobs_topic, 0.5)
    harness.intake = IntakeService(harness.intake_pool, harness.evidence, broken, settings)
    job = harness.capture([product("gap")])
    broken.close()
    assert harness.job(job)["status"] == "pending"
    with running_loop(harness):
        time.sleep(1.5)  # the worker has nothing to go on: no message, not its scan
        assert harness.job(job)["status"] == "pending"
        with harness.conn() as conn:
            conn.execute("UPDATE intake_job SET next_attempt_at = clock_timestamp()")
        sweeper_settings = SweeperSettings(
            resolver_dsn=harness.db.resolver_dsn,
            kafka_bootstrap=harness.settings.kafka_bootstrap,
            jobs_topic=harness.settings.jobs_topic,
            enqueue_timeout_seconds=10,
        )
        enqueuer = JobEnqueuer(sweeper_settings.kafka_bootstrap, sweeper_settings.jobs_topic, 10)
        with ConnectionPool(
            harness.db.resolver_dsn, min_size=1, max_size=2, kwargs={"autocommit": True}
        ) as pool:
            result = Sweeper(pool, enqueuer, sweeper_settings).sweep_once()
        enqueuer.close()
        assert (result.claimed, result.enqueued) == (1, 1)
        wait_for(done(harness, job))
    assert harness.results(job)["gap"][0] == "applied"


def test_a_job_whose_message_was_lost_is_taken_by_the_repair_scan(harness: Harness) -> None:
    harness.bind()
    harness.activate()
    lost = harness.capture([product("lost")])
    # Its message went to a topic no worker reads: as if it had been lost.
    with harness.conn() as conn:
        conn.execute(
            "UPDATE intake_job SET enqueued_at = clock_timestamp() - interval '1 hour'"
            " WHERE job_id = %s",
            (lost.job_id,),
        )
    with running_loop(harness, orphaned_after=600):
        wait_for(done(harness, lost))


def test_the_process_serves_health_and_metrics_and_stops_on_sigterm(harness: Harness) -> None:
    harness.bind()
    harness.activate()
    job = harness.capture([product("proc")])
    port = free_port()
    env = {
        **os.environ,
        "GAPLESS_JOBS_TOPIC": harness.settings.jobs_topic,
        "GAPLESS_WORKER_HTTP_PORT": str(port),
        "GAPLESS_WORKER_GROUP": f"test-process-{harness.settings.jobs_topic}",
    }
    child = subprocess.Popen(
        [sys.executable, "-c", "from infra.cli.main import main; main()", "resolver-worker"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        finished = done(harness, job)
        wait_for(lambda: finished() or child.poll() is not None, timeout=60)
        assert child.poll() is None, child.communicate()[1].decode()[-2000:]
        health = urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5).read()
        ready = urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5).read()
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    finally:
        child.send_signal(signal.SIGTERM)
        _out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err.decode()[-2000:]
    assert health == b"ok\n"
    assert ready == b"ready\n"
    text = metrics.decode()
    assert 'gapless_worker_items_total{outcome="applied"} 1.0' in text
    assert 'gapless_intake_jobs{status="done"} 1.0' in text
    assert 'gapless_worker_open_items{outcome="failed"} 0.0' in text
    log = err.decode()
    assert '"msg":"resolver-worker stopped"' in log
