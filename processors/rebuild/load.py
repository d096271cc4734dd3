"""Load phase: a ready export into the rebuild's new projection generation.

The generation is isolated from serving: readers and the live applier use the
generation of the live consumer's progress row, never this one, until cutover. The
rows go through the projections' own write path (``projections.registry.apply``:
the set-based, revision-guarded upsert), one chunk per transaction:

1. fetch the manifest and check it against the SHA-256 the export row holds;
2. for each chunk after ``chunks_loaded``: fetch it, check its SHA-256 and framing,
   decode its events (each must be of the rebuild's stream and at W);
3. in one transaction: lock the rebuild row, require phase ``loading`` and that
   no other worker loaded this chunk meanwhile, write the events into the
   generation, count the chunk; commit;
4. after the last chunk, in one transaction: the shadow's own progress row at W in
   the generation (``shadow_consumer``), and phase ``catching_up``.

A crash inside 3 rolls the chunk back; after it the chunk and its count are
committed together, so the next attempt resumes at the next chunk (and a chunk
written twice would change nothing: the upsert never lowers a revision). A bad
checksum, a missing object or a foreign record raises before anything of that
chunk is written; the caller fails the rebuild with the reason, and serving never
saw any of it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from db import rebuilds as sql
from processors.projections import registry
from processors.rebuild.exceptions import ExportMismatch, RebuildNotFound, WrongPhase
from schemas.codec import CODEC
from schemas.events import Envelope
from schemas.exports import Manifest, unframe

Fetch = Callable[[str], bytes]


@dataclass(frozen=True, slots=True)
class Loaded:
    chunks: int
    rows: int


def read_manifest(fetch: Fetch, key: str, sha256: str) -> Manifest:
    return Manifest.from_bytes(fetch(key), sha256)


def _events(data: bytes, expected_sha256: str, manifest: Manifest) -> list[Envelope]:
    events = [CODEC.decode_value(record) for record in unframe(data, expected_sha256)]
    for event in events:
        if event.stream != manifest.stream or event.position != manifest.position:
            raise ExportMismatch(
                f"export {manifest.export_id}: event {event.event_id} is of {event.stream}"
                f" at {event.position}, not of {manifest.stream} at {manifest.position}"
            )
    return events


def load(
    product_dsn: str,
    rebuild_id: uuid.UUID,
    manifest: Manifest,
    fetch: Fetch,
    on_chunk: Callable[[int, int], None] = lambda _chunks, _rows: None,
) -> Loaded:
    """Steps 2-4 above for a rebuild in phase ``loading`` with its generation set."""
    with psycopg.connect(product_dsn) as conn:
        row = sql.get(conn, rebuild_id)
        conn.rollback()
        if row is None:
            raise RebuildNotFound(f"no rebuild {rebuild_id}")
        for number, chunk in enumerate(manifest.chunks, start=1):
            if number <= row.chunks_loaded:
                continue
            events = _events(fetch(chunk.key), chunk.sha256, manifest)
            with conn.transaction():
                row = _locked_in(conn, rebuild_id, "loading")
                if row.chunks_loaded >= number:
                    continue  # another worker loaded it meanwhile
                assert row.generation is not None
                registry.apply(conn, row.generation, events)
                row = sql.update(
                    conn,
                    rebuild_id,
                    "loading",
                    chunks_loaded=number,
                    rows_loaded=row.rows_loaded + len(events),
                )
            on_chunk(row.chunks_loaded, row.rows_loaded)
        with conn.transaction():
            row = _locked_in(conn, rebuild_id, "loading")
            assert row.generation is not None
            sql.start_shadow(
                conn, row.shadow_consumer, manifest.stream, manifest.position, row.generation
            )
            row = sql.update(conn, rebuild_id, "catching_up")
        return Loaded(row.chunks_loaded, row.rows_loaded)


def _locked_in(conn: psycopg.Connection, rebuild_id: uuid.UUID, phase: str) -> sql.RebuildRow:
    row = sql.get(conn, rebuild_id, lock=True)
    if row is None:
        raise RebuildNotFound(f"no rebuild {rebuild_id}")
    if row.phase != phase:
        raise WrongPhase(f"rebuild {rebuild_id} is {row.phase}, not {phase}")
    return row
