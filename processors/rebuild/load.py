"""Load phase: a ready export into the rebuild's new projection generation.

The generation is isolated from serving: readers and the live applier use the
generation of the live consumer's progress row, never this one, until cutover. Each
chunk holds one kind of record in ``COPY`` text format (``schemas.exports``) and goes
straight into its kind's projection table with that projection's own ``COPY``
(``Projection.load_chunk``, ``processors.projections.bulk``): no record is decoded
in Python and none is staged, so PostgreSQL parses each field once, as a bare
``COPY`` of the rows would. The derived search documents are built once, at the end
(``search_documents.build_loaded``), not refreshed per chunk: the export puts items
before their values, so a refresh per chunk would write every document twice. One
chunk per transaction:

1. fetch the manifest and check it against the SHA-256 the export row holds; it
   must be of the rebuild's stream at its W, with kinds of record the projections
   load; before the attempt's first chunk, record what it holds (``rows_total``, its
   count of each kind) for the rebuild's progress (``processors.rebuild.progress``);
2. for each chunk not in ``loaded_chunks``, several at once
   (``GAPLESS_REBUILD_LOAD_CONNECTIONS``, each on its own connection: PostgreSQL
   copies each in a backend of its own, so a load uses more than one core): fetch
   it, check its SHA-256 and that it holds the manifest's number of whole lines, of
   one kind the projections load;
3. in one transaction of the chunk's connection: check (unlocked) that the rebuild
   is in phase ``loading`` in the step's attempt under its worker's claim and the
   chunk not loaded, ``COPY`` the chunk into its kind's projection in the generation
   (it must insert as many rows as the manifest counts), then lock the rebuild row,
   check all that again, and record the chunk (``loaded_chunks``, ``chunks_loaded``,
   ``rows_loaded``) and what it cost (``load_cost``: the seconds since the previous
   chunk was recorded, its fetch included); commit. Only these ends queue behind
   the row lock, never the copies;
4. after the last chunk, in one transaction: build every search document of the
   catalog in the generation from its item row and values, ``ANALYZE`` the
   projection tables (a load writes faster than autovacuum notices: without it the
   catch-up and then the live applier would run on statistics that know nothing of
   the generation, and their statements on it would be planned for an empty one),
   the shadow's own progress row at W in the generation (``shadow_consumer``), and
   phase ``catching_up``.

A crash inside 3 rolls the chunk back (and the other chunks under way, each in its
own transaction); a chunk's rows, its number and its cost are committed together, so
the next attempt loads exactly the chunks not listed and no chunk is ever written
twice (the copy has no conflict clause: an aggregate exported twice fails as a
mismatch, unless the chunk turns out to be another worker's by then, which is a lost
claim). Between chunks the generation holds
source rows without search documents; nothing reads it until 4 is committed. A crash
inside 4 rolls the documents back with the phase, so the next attempt skips every
chunk and runs 4 again (the build writes only documents not already stored as they
are, so running it again is harmless either way). A bad checksum, a missing object, a
foreign manifest or a chunk its manifest does not describe raises before anything of
that chunk is written; a record PostgreSQL cannot read, or a count that does not add
up, rolls the chunk back. The caller fails the rebuild with the reason, and serving
never saw any of it.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

import psycopg
from psycopg.types.json import Jsonb

from db.exceptions import RebuildClaimLost
from db.product import rebuilds as sql
from processors.projections import registry, search_documents
from processors.projections.bulk import LoadTarget
from processors.rebuild.exceptions import ExportMismatch, RebuildNotFound, WrongPhase
from schemas.exports import ExportCorrupt, Manifest, check_chunk

Fetch = Callable[[str], bytes]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Loaded:
    chunks: int
    rows: int


def read_manifest(fetch: Fetch, key: str, sha256: str) -> Manifest:
    return Manifest.from_bytes(fetch(key), sha256)


def _require_loadable(manifest: Manifest, what: str, kinds: Mapping[str, int]) -> None:
    unknown = sorted(set(kinds) - registry.LOADED)
    if unknown:
        raise ExportMismatch(
            f"export {manifest.export_id}: {what} holds records of {unknown},"
            " which no projection loads"
        )


def _check_manifest(manifest: Manifest, row: sql.RebuildRow) -> None:
    if manifest.stream != row.stream or (
        row.export_position is not None and manifest.position != row.export_position
    ):
        raise ExportMismatch(
            f"export {manifest.export_id} is of {manifest.stream} at {manifest.position},"
            f" not of {row.stream} at {row.export_position}"
        )
    _require_loadable(manifest, "the export", manifest.by_aggregate)


def _chunk(data: bytes, manifest: Manifest, number: int) -> bytes:
    chunk = manifest.chunks[number - 1]
    checked = check_chunk(data, chunk.sha256, chunk.records)
    _require_loadable(manifest, f"chunk {number}", chunk.kinds)
    _ = chunk.kind  # refuses a chunk of other than one kind
    if sum(chunk.kinds.values()) != chunk.records:
        raise ExportMismatch(
            f"export {manifest.export_id}: chunk {number} counts {chunk.kinds} of its"
            f" {chunk.records} records"
        )
    return checked


def _write_chunk(
    conn: psycopg.Connection, target: LoadTarget, data: bytes, kind: str, records: int
) -> None:
    """Steps 3's writes, in the caller's transaction."""
    try:
        inserted = registry.BY_AGGREGATE[kind].load_chunk(conn, target, data)
    except psycopg.errors.UniqueViolation as exc:
        raise ExportMismatch(f"an aggregate is in the export twice: {exc}") from exc
    except (psycopg.DataError, psycopg.IntegrityError) as exc:
        raise ExportCorrupt(f"a {kind} record PostgreSQL cannot read: {exc}") from exc
    if inserted != records:
        raise ExportMismatch(f"the chunk inserted {inserted} rows, its manifest counts {records}")


def load(
    product_dsn: str,
    rebuild_id: uuid.UUID,
    manifest: Manifest,
    fetch: Fetch,
    on_chunk: Callable[[int, int], None] = lambda _chunks, _rows: None,
    *,
    attempt: int | None = None,
    worker: str | None = None,
    connections: int = 1,
) -> Loaded:
    """Steps 2-4 above for a rebuild in phase ``loading`` with its generation set (and
    the manifest's own checks of step 1). ``attempt`` and ``worker``: the step's, which
    each transaction of step 3 and 4 requires still (a restarted rebuild loads another
    export into another generation; a rebuild another worker claims is its to load).
    ``connections``: chunks copied at once, each on its own connection (``on_chunk``
    is called in the caller's thread after each one, and before the next starts)."""
    with psycopg.connect(product_dsn) as conn:
        row = sql.get(conn, rebuild_id)
        conn.rollback()
        if row is None:
            raise RebuildNotFound(f"no rebuild {rebuild_id}")
        _check_manifest(manifest, row)
        with conn.transaction():
            if row.chunks_loaded == 0 or row.rows_total is None:
                _record_totals(conn, rebuild_id, manifest, attempt, worker)
        if row.generation is None:
            raise WrongPhase(f"rebuild {rebuild_id} is loading without a generation")
        target = LoadTarget(
            row.generation, row.stream.tenant_id, row.stream.catalog_id, manifest.position
        )
        loaded = set(row.loaded_chunks)
        todo = [n for n in range(1, len(manifest.chunks) + 1) if n not in loaded]
        _Copier(product_dsn, rebuild_id, manifest, fetch, target, attempt, worker).run(
            todo, connections, on_chunk
        )
        with conn.transaction():
            row = _locked_in(conn, rebuild_id, "loading", attempt, worker)
            finish = time.monotonic()
            documents = search_documents.build_loaded(conn, target)
            built = time.monotonic()
            registry.analyze(conn)
            log.info(
                "rebuild %s: %d search documents built in %.2f s, tables analyzed in %.2f s",
                rebuild_id,
                documents,
                built - finish,
                time.monotonic() - built,
            )
            sql.start_shadow(
                conn, row.shadow_consumer, manifest.stream, manifest.position, target.generation
            )
            row = sql.update(conn, rebuild_id, "catching_up")
        return Loaded(row.chunks_loaded, row.rows_loaded)


class _Copier:
    """Step 2-3 for the chunks a load has still to copy, on up to ``connections`` at
    once. Each chunk is one transaction of its own connection: the chunk's ``COPY``
    first, then the rebuild row locked (so only these short ends of the transactions
    queue behind each other, never the copies), checked, and the chunk recorded with
    its rows. A chunk's cost is the seconds since the previous chunk of the load was
    recorded, whichever connection it was on: with several at once, the costs still
    add up to the time the load took."""

    def __init__(
        self,
        product_dsn: str,
        rebuild_id: uuid.UUID,
        manifest: Manifest,
        fetch: Fetch,
        target: LoadTarget,
        attempt: int | None,
        worker: str | None,
    ) -> None:
        self.product_dsn = product_dsn
        self.rebuild_id = rebuild_id
        self.manifest = manifest
        self.fetch = fetch
        self.target = target
        self.attempt = attempt
        self.worker = worker
        self._mark = time.monotonic()
        self._mark_lock = threading.Lock()

    def run(self, todo: list[int], connections: int, on_chunk: Callable[[int, int], None]) -> None:
        """Copy the chunks numbered ``todo`` (in that order of starting); the first
        failure (a chunk's, or ``on_chunk``'s) stops new chunks from starting, lets
        those under way end, and is raised."""
        if not todo:
            return
        lanes = max(1, min(connections, len(todo)))
        conns = [psycopg.connect(self.product_dsn) for _ in range(lanes)]
        try:
            with ThreadPoolExecutor(lanes, thread_name_prefix="rebuild-load") as pool:
                free = list(conns)
                running: dict[Future[sql.RebuildRow | None], psycopg.Connection] = {}
                pending = iter(todo)
                error: BaseException | None = None
                while True:
                    while error is None and free:
                        number = next(pending, None)
                        if number is None:
                            break
                        lane = free.pop()
                        running[pool.submit(self._copy, lane, number)] = lane
                    if not running:
                        break
                    finished, _ = wait(running, return_when=FIRST_COMPLETED)
                    for future in finished:
                        free.append(running.pop(future))
                        try:
                            row = future.result()
                            if row is not None and error is None:
                                on_chunk(row.chunks_loaded, row.rows_loaded)
                        except BaseException as exc:  # the first one is raised below
                            error = error or exc
                if error is not None:
                    raise error
        finally:
            for lane in conns:
                lane.close()

    def _copy(self, conn: psycopg.Connection, number: int) -> sql.RebuildRow | None:
        """One chunk in one transaction; the row as it was recorded, or None if another
        worker had loaded it."""
        chunk = self.manifest.chunks[number - 1]
        data = _chunk(self.fetch(chunk.key), self.manifest, number)
        try:
            with conn.transaction():
                if not self._mine(conn, number):
                    return None
                _write_chunk(conn, self.target, data, chunk.kind, chunk.records)
                row = _locked_in(conn, self.rebuild_id, "loading", self.attempt, self.worker)
                if number in row.loaded_chunks:
                    return None  # rolled back: another worker loaded it meanwhile
                with self._mark_lock:
                    now = time.monotonic()
                    seconds, self._mark = now - self._mark, now
                return sql.update(
                    conn,
                    self.rebuild_id,
                    "loading",
                    chunks_loaded=row.chunks_loaded + 1,
                    loaded_chunks=[*row.loaded_chunks, number],
                    rows_loaded=row.rows_loaded + chunk.records,
                    load_cost=Jsonb(with_chunk(row.load_cost, chunk.kinds, seconds)),
                )
        except ExportMismatch:
            # A duplicate key is a broken export only if the chunk is still this
            # step's to load: else another worker's copy of it got there first.
            with conn.transaction():
                if not self._mine(conn, number):
                    return None
            raise

    def _mine(self, conn: psycopg.Connection, number: int) -> bool:
        """Whether chunk ``number`` is still this step's to load (not locked: a check
        before the copy, which the row lock after it confirms). Raises ``WrongPhase``
        or ``RebuildClaimLost`` once the rebuild moved on or another worker has it."""
        row = _locked_in(conn, self.rebuild_id, "loading", self.attempt, self.worker, lock=False)
        return number not in row.loaded_chunks


def _record_totals(
    conn: psycopg.Connection,
    rebuild_id: uuid.UUID,
    manifest: Manifest,
    attempt: int | None,
    worker: str | None,
) -> None:
    """Step 1's record of what the export holds, in the caller's transaction; the
    costs of an earlier attempt's chunks go (its export is another)."""
    _locked_in(conn, rebuild_id, "loading", attempt, worker)
    sql.update(
        conn,
        rebuild_id,
        "loading",
        rows_total=manifest.records,
        rows_by_kind=Jsonb(dict(manifest.by_aggregate)),
        load_cost=Jsonb({}),
    )


def with_chunk(
    cost: Mapping[str, Mapping[str, float]], kinds: Mapping[str, int], seconds: float
) -> dict[str, dict[str, float]]:
    """``cost`` with one more chunk of ``kinds`` that took ``seconds``: each kind's
    rows, and its share of the seconds by record count."""
    out = {kind: dict(c) for kind, c in cost.items()}
    records = sum(kinds.values())
    for kind, n in kinds.items():
        if n <= 0:
            continue
        mine = out.setdefault(kind, {"rows": 0, "seconds": 0.0})
        mine["rows"] = int(mine.get("rows", 0)) + n
        mine["seconds"] = float(mine.get("seconds", 0.0)) + seconds * n / records
    return out


def _locked_in(
    conn: psycopg.Connection,
    rebuild_id: uuid.UUID,
    phase: str,
    attempt: int | None,
    worker: str | None,
    *,
    lock: bool = True,
) -> sql.RebuildRow:
    """The rebuild row (locked unless ``lock`` is false) if it is in ``phase`` in the
    step's attempt under its worker's claim; else ``WrongPhase`` or
    ``RebuildClaimLost``."""
    row = sql.get(conn, rebuild_id, lock=lock)
    if row is None:
        raise RebuildNotFound(f"no rebuild {rebuild_id}")
    if row.phase != phase or (attempt is not None and row.attempt != attempt):
        raise WrongPhase(
            f"rebuild {rebuild_id} is {row.phase} in attempt {row.attempt}, not {phase}"
            f" in attempt {attempt}"
        )
    if worker is not None and row.claimed_by != worker:
        raise RebuildClaimLost(f"rebuild {rebuild_id} is claimed by {row.claimed_by}, not {worker}")
    return row
