"""How far a rebuild is, how fast it goes and when it should be done: a pure function
of its row (``estimate``), for ``gapless rebuild status``, ``--wait`` and the agents'
metrics.

The work counted is what is left of the load plus the catch-up; the phases before
(lease, export) have no known size here, so they show 0 and no ETA, and the cutover
is taken as instant (its pause is milliseconds). All of it in estimated seconds:

1. **Load.** Each kind of record costs what its chunks measured: the load records,
   per kind, the rows loaded and the seconds their chunks took (``load_cost``; a
   chunk holds one kind). What is left of a kind is its manifest count
   (``rows_by_kind``) less what was loaded, at its measured cost. A kind not reached
   yet costs the measured ones' mean cost scaled by ``PRIOR_COST``, the kinds'
   relative costs as measured on a seeded catalog (items as 1). After the last chunk
   the search documents are built, one per item, each at ``DOCUMENT_COST`` times an
   item row's cost: that is left until the load ends. With nothing measured yet, or
   a row from before ``rows_by_kind`` (only ``rows_total``), there is no ETA (or one
   at the load's mean rate).
2. **Catch-up.** The positions from the export's W (or the shadow's progress) to the
   target H once chosen, else to the live consumer's progress (``live_position``,
   read with the row), plus what the live stream adds meanwhile at the rate it
   added since the export began; at the catch-up's own measured rate once it has
   applied some, else at ``ASSUMED_CATCHUP_EVENTS_PER_S``.

``fraction`` is the work done over the work done and left, in those seconds, so the
fraction and the ETA agree; it is the share of rows loaded when every kind costs
the same. ``rate_rows_s`` is rows loaded per second of loading while loading, and
events applied per second while catching up (``rate_of`` says which). The figures
are those of the row's last update (a chunk loaded, a catch-up step recorded), when
its counts were taken; the ETA then counts down from it, while loading by no more than
the mean chunk's seconds (only the chunk in flight can have been loaded since), so a
worker that died mid-load shows an ETA that stops moving until another worker
carries on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from db.product.rebuilds import RebuildRow

ASSUMED_CATCHUP_EVENTS_PER_S = 3500.0
"""The shadow's catch-up rate until it measured its own (benchmarks: 7,506 positions
in 2.3 s, 10,236 in 2.6 s after a load on two cores)."""

PRIOR_COST: Mapping[str, float] = {
    "catalog_item": 1.0,
    "attribute_definition": 1.0,
    "attribute_value": 1.14,
    "listing_mapping": 1.53,
    "shipping_policy": 2.16,
    "item_split": 6.8,
}
"""Relative cost of a row of each kind, for the kinds not measured yet (unknown kinds
count as 1). Measured on two cores, loading the bench's seeded catalog of 100,000
items (727,086 records in 39 chunks of at most 20,000, each chunk's fetch and commit
included): an item 4.4 µs, an attribute value 5.0 µs, a listing mapping 6.8 µs, a
policy version 9.5 µs, a split 30 µs (its 2,000 rows in one chunk, whose fetch and
commit weigh the most); too few attribute definitions to measure."""

DOCUMENT_COST = 6.0
"""A search document built after the last chunk, against an item row's load (the
same run: 105,082 documents in 2.77 s, 26 µs each: its text, the generated
``tsvector`` and its GIN entries)."""

_BEFORE_LOAD = frozenset({"requested", "leased", "exporting"})


@dataclass(frozen=True, slots=True)
class Progress:
    fraction: float
    """Share of the work done, 0 to 1."""
    rate_rows_s: float | None
    """Rows loaded (or events caught up, see ``rate_of``) per second; None unmeasured."""
    eta_s: float | None
    """Seconds left to the end of the catch-up; None if not known."""
    rate_of: str = "rows"
    """``rows`` while loading, ``events`` while catching up or cutting over."""


@dataclass(frozen=True, slots=True)
class _Load:
    done_s: float
    left_s: float | None
    rate: float | None
    documents_s: float = 0.0
    """Of ``left_s`` while loading: the search documents' build after the last chunk."""


def estimate(row: RebuildRow, now: datetime) -> Progress:
    """The rebuild's progress at ``now`` from its row (see the module's steps): the
    figures as of the row's last update, when its counts were recorded, and the ETA
    less the time since (at least 0)."""
    at = min(now, row.updated_at)
    found = _as_of(row, at)
    if found.eta_s is None or found.eta_s == 0:
        return found
    since = max(0.0, (now - at).total_seconds())
    floor = 0.0
    if row.phase == "loading" and row.chunks_loaded > 0:
        # at most the chunk in flight was loaded since
        floor = found.eta_s - _load(row, 0.0).done_s / row.chunks_loaded
    eta = max(0.0, floor, found.eta_s - since)
    return Progress(found.fraction, found.rate_rows_s, eta, found.rate_of)


def _as_of(row: RebuildRow, at: datetime) -> Progress:
    if row.phase == "done":
        return Progress(1.0, None, 0.0)
    if row.phase in ("failed", "cancelled"):
        return Progress(_rows_fraction(row), None, None)
    if row.phase in _BEFORE_LOAD:
        return Progress(0.0, None, None)
    in_phase = _in_phase(row, at)
    if row.phase == "loading":
        load = _load(row, in_phase)
        catchup_left = _catchup_left(row, at, None, load.left_s or 0.0)
        left = None if load.left_s is None else load.left_s + catchup_left
        return Progress(_fraction(load.done_s, left, row), load.rate, left)
    # catching_up, cutting_over: the load is over, its documents built
    load = _load(row, 0.0)
    load_done = load.done_s + load.documents_s
    rate = _catchup_rate(row, in_phase)
    done_positions = max(0, (row.caught_up_position or 0) - (row.export_position or 0))
    done = load_done + done_positions / (rate or ASSUMED_CATCHUP_EVENTS_PER_S)
    left = _catchup_left(row, at, rate, 0.0)
    return Progress(_fraction(done, left, row), rate, left, "events")


def _in_phase(row: RebuildRow, now: datetime) -> float:
    """Seconds since the row entered its phase."""
    started = row.phase_started_at or row.created_at
    return max(0.0, (now - started).total_seconds())


def _rows_fraction(row: RebuildRow) -> float:
    if not row.rows_total:
        return 0.0
    return min(1.0, row.rows_loaded / row.rows_total)


def _fraction(done: float, left: float | None, row: RebuildRow) -> float:
    if left is None:
        return _rows_fraction(row)
    if done + left <= 0:
        return 1.0 if row.phase != "loading" else _rows_fraction(row)
    return min(1.0, max(0.0, done / (done + left)))


def _measured(row: RebuildRow) -> dict[str, tuple[float, float]]:
    """(rows, seconds) of each kind with both measured."""
    out: dict[str, tuple[float, float]] = {}
    for kind, cost in row.load_cost.items():
        rows, seconds = float(cost.get("rows", 0)), float(cost.get("seconds", 0))
        if rows > 0 and seconds > 0:
            out[kind] = (rows, seconds)
    return out


def _load(row: RebuildRow, in_phase: float) -> _Load:
    """Step 1: seconds of loading done and left, and the rows per second."""
    measured = _measured(row)
    rows_done = sum(r for r, _ in measured.values())
    seconds_done = sum(s for _, s in measured.values())
    if not measured:
        # A row from before ``load_cost``: the load's mean rate over the phase.
        if row.rows_loaded <= 0 or in_phase <= 0:
            return _Load(in_phase, None, None)
        rate = row.rows_loaded / in_phase
        left = None if row.rows_total is None else max(0, row.rows_total - row.rows_loaded) / rate
        return _Load(in_phase, left, rate)
    rate = rows_done / seconds_done
    if not row.rows_by_kind:
        if row.rows_total is None:
            return _Load(seconds_done, None, rate)
        return _Load(seconds_done, max(0, row.rows_total - row.rows_loaded) / rate, rate)
    per_prior = seconds_done / sum(r * PRIOR_COST.get(k, 1.0) for k, (r, _) in measured.items())

    def cost(kind: str) -> float:
        if kind in measured:
            return measured[kind][1] / measured[kind][0]
        return per_prior * PRIOR_COST.get(kind, 1.0)

    left = 0.0
    for kind, total in row.rows_by_kind.items():
        loaded = float(row.load_cost.get(kind, {}).get("rows", 0))
        left += max(0.0, total - loaded) * cost(kind)
    items = row.rows_by_kind.get("catalog_item", 0)
    documents = items * cost("catalog_item") * DOCUMENT_COST
    return _Load(seconds_done, left + documents, rate, documents)


def _catchup_rate(row: RebuildRow, in_phase: float) -> float | None:
    """Events the shadow applied per second of catching up, if it applied any."""
    if row.phase != "catching_up" or row.caught_up_position is None:
        return None
    applied = row.caught_up_position - (row.export_position or 0)
    if applied <= 0 or in_phase <= 0:
        return None
    return applied / in_phase


def _catchup_left(row: RebuildRow, now: datetime, rate: float | None, load_left_s: float) -> float:
    """Step 2: seconds of catching up left (0 while W is unknown)."""
    if row.export_position is None:
        return 0.0
    start = max(row.export_position, row.caught_up_position or 0)
    head = row.live_position if row.live_position is not None else start
    if row.phase == "catching_up" and row.target_position is not None:
        head = row.target_position
    backlog = float(max(0, head - start))
    if row.phase == "loading" and row.live_position is not None:
        backlog += _live_rate(row, now) * load_left_s
    return backlog / (rate or ASSUMED_CATCHUP_EVENTS_PER_S)


def _live_rate(row: RebuildRow, now: datetime) -> float:
    """Positions the live stream added per second since the export took W (the export
    began about then: its seconds in ``timings`` plus the loading so far)."""
    if row.live_position is None or row.export_position is None:
        return 0.0
    since = row.timings.get("exporting", 0.0) + _in_phase(row, now)
    added = row.live_position - row.export_position
    return added / since if added > 0 and since > 0 else 0.0
