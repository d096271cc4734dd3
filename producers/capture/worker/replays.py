"""Replaying a stored capture under the current parser version.

A replay is a job of its own, kind ``capture.replay.v<parser version>``, with a
deterministic id from the capture and that kind: asking twice under one parser
version names the same job (its dedupe id), and a later parser version names a new
one. It runs like any capture job. Its results are keyed by the parser version too,
so under the version that already processed the capture every product is found
settled and nothing changes; under a newer version they are new results, and
stale-work protection still lets a newer capture of a source item win. A replay never
touches a stream's cursor except through the decisions it records.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import psycopg

from db.repositories import capture_jobs as jobs
from db.unit_of_work import Transaction
from producers.capture.adapters import adapter_named
from producers.capture.exceptions import CaptureNotFound
from producers.capture.rules import job_id as job_id_of
from producers.capture.worker import sources

REPLAY_KIND_PREFIX = "capture.replay.v"
REPLAY_KINDS = f"{REPLAY_KIND_PREFIX}%"
"""The LIKE pattern of every replay kind, for the worker's claims."""


def replay_kind(parser_version: int) -> str:
    return f"{REPLAY_KIND_PREFIX}{parser_version}"


@dataclass(frozen=True, slots=True)
class Replay:
    job_id: uuid.UUID
    kind: str
    created: bool  # False: this replay was asked for before (the same job)


def request_replay(
    conn: psycopg.Connection, tenant_id: str, capture_id: uuid.UUID, actor: str, reason: str = ""
) -> Replay:
    """Ask for the capture to be processed again by its source's current adapter.

    One transaction: 1. read the capture and its source's binding (the adapter names
    the parser version); 2. insert the replay job, pending and due now, unless it
    exists; 3. audit a new one. The pending job is enqueued by the sweeper.
    """
    with conn.transaction():
        tx = Transaction(conn)
        row = tx.execute(
            "SELECT source FROM capture WHERE tenant_id = %s AND capture_id = %s",
            (tenant_id, capture_id),
        ).fetchone()
        if row is None:
            raise CaptureNotFound(f"no capture {capture_id} of tenant {tenant_id!r}")
        binding = sources.binding_of(tx, tenant_id, str(row[0]))
        kind = replay_kind(adapter_named(binding.adapter).parser_version)
        job = job_id_of(tenant_id, capture_id, kind)
        created = jobs.insert_pending(tx, job, tenant_id, capture_id, kind)
        if created:
            jobs.record_repair(tx, tenant_id, job, None, "replay", actor, reason)
    return Replay(job, kind, created)
