"""Durable contiguous progress per consumer and stream, in the product database.

Progress P means every position <= P of the stream has a terminal outcome in the
inbox (applied, ignored or skipped; not parked or quarantined). Kafka offsets play
no part: after any crash, restart or rebalance, P says exactly what is done.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import psycopg

from db.product import rebuilds
from processors.applier.exceptions import ShadowProgressLost

Stream = tuple[str, str, int]


@dataclass(frozen=True, slots=True)
class StreamProgress:
    position: int
    generation: int


@dataclass(slots=True)
class Counts:
    applied: int = 0
    duplicates: int = 0
    parked: int = 0
    released: int = 0
    ignored: int = 0


def lock(
    conn: psycopg.Connection,
    consumer: str,
    streams: Iterable[Stream],
    *,
    generation: int | None = None,
) -> dict[Stream, StreamProgress]:
    """Lock this consumer's progress rows of ``streams``, creating missing ones (in the
    generation the consumer's other rows of the catalog serve, a new epoch's stream
    after a cutover too; else generation 1).

    ``generation``: the consumer is a rebuild's shadow bound to that generation. It
    creates no row (only the load starts one, ``db.product.rebuilds.start_shadow``), and a
    row missing or in another generation raises ``ShadowProgressLost``: created here,
    it would be in a generation that may serve.

    The row lock serializes appliers of one stream: during a rebalance two workers
    can briefly hold the same partition, and without the lock both could judge the
    same event new. Rows are created, then locked, in one order (the streams sorted
    byte-wise, which ``COLLATE "C"`` makes PostgreSQL's order too), so two appliers
    cannot deadlock. Two statements, whatever the number of streams.
    """
    wanted = sorted(set(streams))
    result: dict[Stream, StreamProgress] = {}
    if not wanted:
        return result
    params = {
        "consumer": consumer,
        "tenants": [s[0] for s in wanted],
        "catalogs": [s[1] for s in wanted],
        "epochs": [s[2] for s in wanted],
    }
    if generation is None:
        _create_missing(conn, params)
    rows = conn.execute(
        "SELECT sp.tenant_id, sp.catalog_id, sp.history_epoch, sp.position, sp.generation"
        " FROM stream_progress sp"
        " JOIN unnest(%(tenants)b::text[], %(catalogs)b::text[], %(epochs)b::int8[])"
        " AS k(t, c, e) ON sp.tenant_id = k.t AND sp.catalog_id = k.c"
        " AND sp.history_epoch = k.e"
        " WHERE sp.consumer = %(consumer)s"
        ' ORDER BY sp.tenant_id COLLATE "C", sp.catalog_id COLLATE "C", sp.history_epoch'
        " FOR UPDATE OF sp",
        params,
    ).fetchall()
    for t, c, e, position, gen in rows:
        result[(t, c, int(e))] = StreamProgress(int(position), int(gen))
    if generation is not None:
        lost = [s for s in wanted if s not in result or result[s].generation != generation]
        if lost:
            raise ShadowProgressLost(
                f"shadow {consumer} has no progress row of {lost} in generation {generation}"
                " (its rebuild was restarted, cancelled or cleaned up meanwhile)"
            )
    assert len(result) == len(wanted)
    return result


def bound_generation(conn: psycopg.Connection, consumer: str) -> int | None:
    """The generation ``consumer`` must apply into: its rebuild's while it is a shadow
    that applies (catching up, cutting over); None for a live consumer (its rows say).
    For the repair paths (an operator's retry or skip of a shadow's entry), which
    would otherwise create a missing shadow row in a generation that may serve: a
    shadow whose rebuild does not apply now raises ``ShadowProgressLost`` (its open
    entries become ``superseded`` when the rebuild is cleaned up)."""
    generation = rebuilds.shadow_generation(conn, consumer)
    if generation is None and rebuilds.is_shadow(conn, consumer):
        raise ShadowProgressLost(
            f"{consumer} is a rebuild's shadow that is not applying now (restarted, over"
            " or not loaded yet): its entries are settled with the rebuild; see"
            " `gapless rebuild status`"
        )
    return generation


def _create_missing(conn: psycopg.Connection, params: Mapping[str, object]) -> None:
    """The rows ``lock`` is about to lock that do not exist yet, in its order."""
    conn.execute(
        "INSERT INTO stream_progress (consumer, tenant_id, catalog_id, history_epoch, generation)"
        " SELECT %(consumer)s, k.t, k.c, k.e, coalesce((SELECT max(o.generation)"
        "  FROM stream_progress o WHERE o.consumer = %(consumer)s AND o.tenant_id = k.t"
        "  AND o.catalog_id = k.c), 1)"
        " FROM unnest(%(tenants)b::text[], %(catalogs)b::text[], %(epochs)b::int8[])"
        " WITH ORDINALITY AS k(t, c, e, n) ORDER BY k.n ON CONFLICT DO NOTHING",
        params,
    )


def generations(
    conn: psycopg.Connection,
    consumer: str,
    locked: dict[Stream, StreamProgress],
    catalogs: Iterable[tuple[str, str]],
) -> dict[tuple[str, str], int]:
    """The generation this consumer applies each catalog's events to: its locked rows
    say so for the batch's streams; a catalog reached only through released parked
    events of another stream is looked up (1 if the consumer has no row of it)."""
    found = {(t, c): p.generation for (t, c, _e), p in locked.items()}
    missing = sorted(set(catalogs) - found.keys())
    if missing:
        rows = conn.execute(
            "SELECT tenant_id, catalog_id, max(generation) FROM stream_progress"
            " WHERE consumer = %s AND (tenant_id, catalog_id) IN"
            " (SELECT * FROM unnest(%b::text[], %b::text[])) GROUP BY tenant_id, catalog_id",
            (consumer, [t for t, _ in missing], [c for _, c in missing]),
        ).fetchall()
        found.update({(t, c): int(g) for t, c, g in rows})
        found.update({k: 1 for k in missing if k not in found})
    return found


def _run_end(tenant: str, catalog: str, epoch: str, current: str) -> str:
    """The end of a stream's contiguous run of terminal outcomes above ``current``, as
    a query over those SQL expressions (parameters, or a row's columns).

    Numbering the terminal positions above ``current`` 1, 2, 3…, a position belongs to
    the run exactly when position - row_number = ``current``."""
    return (
        f"SELECT coalesce(max(p), {current}) AS p FROM ("
        " SELECT p, p - row_number() OVER (ORDER BY p) AS shift FROM ("
        "  SELECT DISTINCT position AS p FROM inbox"
        f"  WHERE consumer = %(consumer)s AND tenant_id = {tenant} AND catalog_id = {catalog}"
        f"  AND history_epoch = {epoch} AND position > {current}"
        "  AND outcome NOT IN ('parked', 'quarantined')) terminal"
        f") numbered WHERE shift = {current}"
    )


_CONTIGUOUS_END = _run_end("%(tenant)s", "%(catalog)s", "%(epoch)s", "%(current)s")


def contiguous_end(conn: psycopg.Connection, consumer: str, stream: Stream, position: int) -> int:
    """The greatest P >= ``position`` such that every position in (position, P] is
    terminal for ``consumer``."""
    tenant, catalog, epoch = stream
    row = conn.execute(
        _CONTIGUOUS_END,
        {
            "consumer": consumer,
            "tenant": tenant,
            "catalog": catalog,
            "epoch": epoch,
            "current": position,
        },
    ).fetchone()
    assert row is not None
    return int(row[0])


def advance(
    conn: psycopg.Connection, consumer: str, stream: Stream, current: int, counts: Counts
) -> int:
    """Move progress to the end of the contiguous run and add the batch's counts.

    One statement: the run's end is computed and stored together. ``GREATEST`` keeps
    progress from ever moving backwards, whatever the caller read.
    """
    tenant, catalog, epoch = stream
    row = conn.execute(
        f"WITH run AS ({_CONTIGUOUS_END})"
        " UPDATE stream_progress SET position = GREATEST(position, run.p),"
        " applied_count = applied_count + %(applied)s,"
        " duplicate_count = duplicate_count + %(duplicates)s,"
        " parked_count = parked_count + %(parked)s,"
        " released_count = released_count + %(released)s,"
        " ignored_count = ignored_count + %(ignored)s, updated_at = now()"
        " FROM run WHERE consumer = %(consumer)s AND tenant_id = %(tenant)s"
        " AND catalog_id = %(catalog)s AND history_epoch = %(epoch)s"
        " RETURNING run.p",
        {
            "tenant": tenant,
            "catalog": catalog,
            "epoch": epoch,
            "current": current,
            "consumer": consumer,
            "applied": counts.applied,
            "duplicates": counts.duplicates,
            "parked": counts.parked,
            "released": counts.released,
            "ignored": counts.ignored,
        },
    ).fetchone()
    return int(row[0]) if row is not None else contiguous_end(conn, consumer, stream, current)


_RUN_ENDS = (
    f"SELECT k.*, ({_run_end('k.t', 'k.c', 'k.e', 'k.cur')}) AS p"
    " FROM unnest(%(tenants)b::text[], %(catalogs)b::text[], %(epochs)b::int8[],"
    " %(currents)b::int8[], %(applied)b::int8[], %(duplicates)b::int8[],"
    " %(parked)b::int8[], %(released)b::int8[], %(ignored)b::int8[])"
    " AS k(t, c, e, cur, applied, duplicates, parked, released, ignored)"
)
"""``_CONTIGUOUS_END`` for each stream of the arrays, beside its counts."""


def advance_all(
    conn: psycopg.Connection, consumer: str, moves: Mapping[Stream, tuple[int, Counts]]
) -> dict[Stream, int]:
    """``advance`` for each stream of ``moves`` (its progress as read, its counts), in
    one statement whatever their number (one ``advance`` for a single stream); returns
    each one's run end. A batch of a consumer that applies many catalogs' streams
    moves them all in one round trip instead of one each. Inside the batch's
    transaction, with the rows locked (``lock``): a crash before its COMMIT leaves
    every stream's progress where it was, as for the rest of the batch."""
    if len(moves) <= 1:
        return {s: advance(conn, consumer, s, cur, counts) for s, (cur, counts) in moves.items()}
    streams = sorted(moves)
    counts = [moves[s][1] for s in streams]
    rows = conn.execute(
        f"WITH run AS ({_RUN_ENDS})"
        " UPDATE stream_progress sp SET position = GREATEST(sp.position, run.p),"
        " applied_count = sp.applied_count + run.applied,"
        " duplicate_count = sp.duplicate_count + run.duplicates,"
        " parked_count = sp.parked_count + run.parked,"
        " released_count = sp.released_count + run.released,"
        " ignored_count = sp.ignored_count + run.ignored, updated_at = now()"
        " FROM run WHERE sp.consumer = %(consumer)s AND sp.tenant_id = run.t"
        " AND sp.catalog_id = run.c AND sp.history_epoch = run.e"
        " RETURNING run.t, run.c, run.e, run.p",
        {
            "consumer": consumer,
            "tenants": [s[0] for s in streams],
            "catalogs": [s[1] for s in streams],
            "epochs": [s[2] for s in streams],
            "currents": [moves[s][0] for s in streams],
            "applied": [c.applied for c in counts],
            "duplicates": [c.duplicates for c in counts],
            "parked": [c.parked for c in counts],
            "released": [c.released for c in counts],
            "ignored": [c.ignored for c in counts],
        },
    ).fetchall()
    ends = {(t, c, int(e)): int(p) for t, c, e, p in rows}
    for stream in streams:  # no row to move (as ``advance``): where the run ends
        if stream not in ends:
            ends[stream] = contiguous_end(conn, consumer, stream, moves[stream][0])
    return ends
