"""The rebuild bench's pure parts: its figures (JSON and table), the streamed row
comparison, the seed's batches and mix, the live latencies' p99 and ratio, the
ETA's error and the takeover's worst."""

from __future__ import annotations

import dataclasses
import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from db.product.rebuilds import RebuildRow
from infra.bench import rebuild_eta
from infra.bench.rebuild_check import CHECKS, StreamedComparison, compare_rows
from infra.bench.rebuild_eta import EtaSample, eta_error_pct
from infra.bench.rebuild_live import LiveLatency, Window, p99_ratio, slices, summarize
from infra.bench.rebuild_report import Memory, RebuildFigures, render_rebuild_table
from infra.bench.rebuild_seed import MIX, batches, item_id, was_split
from infra.bench.rebuild_takeover import Takeover, worker_of, worst
from infra.demo.projection_check import Check
from processors.rebuild.progress import Progress
from schemas.ids import StreamId

REQUIRED = (
    "rebuild_items",
    "rebuild_rows",
    "rebuild_live_p99_ms",
    "baseline_live_p99_ms",
    "rebuild_live_p99_ratio",
    "rebuild_takeover_s",
    "rebuild_eta_error_pct",
    "rebuild_export_s",
    "rebuild_load_s",
    "rebuild_catchup_s",
    "rebuild_cutover_pause_ms",
    "rebuild_rto_s",
    "rebuild_load_eps",
    "rebuild_bare_copy_eps",
    "rebuild_load_ratio",
    "rebuild_peak_rss_mb",
)


def figures(items: int = 1_000_000, pause_ms: float = 12.5, **changes: object) -> RebuildFigures:
    made = RebuildFigures(
        items=items,
        rows_loaded=1_000_400,
        chunks=51,
        attempts=1,
        rto_s=48.25,
        phases_s={
            "requested": 0.3,
            "leased": 1.2,
            "exporting": 14.0,
            "loading": 20.0,
            "catching_up": 2.0,
            "cutting_over": 1.5,
        },
        export_write_s=12.75,
        cutover_pause_ms=pause_ms,
        catchup_events=900,
        live_events=2_800,
        bare_copy_rows=1_000_000,
        bare_copy_s=8.0,
        api=Memory(120.0, 180.5),
        agents=Memory(150.0, 210.25),
        step_interval_s=1.0,
        rows_checked=1_000_950,
        environment={"cores": 2, "loadavg_start": [1.0, 1.1, 1.2]},
        bare_copy_items_s=2.5,
    )
    return dataclasses.replace(made, **changes)  # type: ignore[arg-type]


def test_the_json_object_has_every_field_the_issue_names_with_derived_rates() -> None:
    d = json.loads(json.dumps(figures().as_dict()))
    assert set(REQUIRED) <= d.keys()
    assert d["rebuild_items"] == 1_000_000
    assert d["rebuild_export_s"] == 14.0
    assert d["rebuild_load_s"] == 20.0
    assert d["rebuild_catchup_s"] == 2.0
    assert d["rebuild_cutover_s"] == 1.5
    assert d["rebuild_rto_s"] == 48.25
    assert d["rebuild_load_eps"] == 50_020.0  # rows loaded / loading seconds
    assert d["rebuild_bare_copy_eps"] == 125_000.0
    assert d["rebuild_load_ratio"] == 0.4  # against the same rows: items and documents
    assert d["rebuild_bare_copy_items_only_eps"] == 400_000.0
    assert d["rebuild_load_ratio_items_only"] == 0.125
    assert d["rebuild_peak_rss_mb"] == 210.2  # the larger process's peak
    assert d["rebuild_api_peak_rss_mb"] == 180.5
    assert d["rebuild_agents_rss_before_mb"] == 150.0
    assert d["cores"] == 2 and d["loadavg_start"] == [1.0, 1.1, 1.2]


def test_rates_of_a_phase_that_took_no_time_are_zero_not_an_error() -> None:
    empty = RebuildFigures(
        **{
            **{f: getattr(figures(), f) for f in RebuildFigures.__dataclass_fields__},
            "phases_s": {},
            "bare_copy_s": 0.0,
            "bare_copy_items_s": 0.0,
        }
    )
    d = empty.as_dict()
    assert d["rebuild_load_eps"] == d["rebuild_bare_copy_eps"] == d["rebuild_load_ratio"] == 0.0
    assert d["rebuild_bare_copy_items_only_eps"] == d["rebuild_load_ratio_items_only"] == 0.0


def test_the_table_shows_each_phase_and_judges_the_targets() -> None:
    table = render_rebuild_table(figures())
    assert "exporting" in table and "14.00" in table and "12.75 s" in table
    assert "RTO" in table and "48.25" in table and ": met" in table
    assert "ratio 0.40 (target >= 0.5: MISSED)" in table
    assert "against the item rows alone 400,000 rows/s: 0.13" in table
    assert "paused 12.5 ms at cutover (target <= 100 ms: met)" in table
    assert "1,000,950 rows compared" in table
    assert "MISSED)" in render_rebuild_table(figures(pause_ms=250.0)).split("paused")[1]
    # The 60 s target is for a million items; a smaller run is not judged by it.
    assert "items: " not in render_rebuild_table(figures(items=500)).split("RTO")[1].split("\n")[0]


CHECK = Check("t", 1, "", "")


def compare(accepted: list[tuple[object, ...]], projected: list[tuple[object, ...]]) -> list[str]:
    out = StreamedComparison()
    count = compare_rows(CHECK, iter(accepted), iter(projected), out)
    assert count == len(accepted)
    assert out.difference_count == len(out.differences)
    return sorted(str(d) for d in out.differences)


def test_equal_streams_have_no_difference() -> None:
    rows: list[tuple[object, ...]] = [("a", 1), ("b", 2), ("c", 3)]
    assert compare(rows, list(rows)) == []
    assert compare([], []) == []


def test_a_missing_extra_or_changed_row_is_a_difference_and_the_rest_still_pair() -> None:
    accepted: list[tuple[object, ...]] = [("a", 1), ("b", 2), ("c", 3), ("d", 4)]
    projected: list[tuple[object, ...]] = [("a", 1), ("c", 3), ("d", 5), ("e", 6)]
    assert compare(accepted, projected) == [
        "t b: accepted=('b', 2) projected=None",
        "t d: accepted=('d', 4) projected=('d', 5)",
        "t e: accepted=None projected=('e', 6)",
    ]


def test_rows_out_of_step_still_pair_up() -> None:
    accepted: list[tuple[object, ...]] = [("a", 1), ("b", 2), ("c", 3)]
    projected: list[tuple[object, ...]] = [("b", 2), ("c", 3), ("a", 1)]
    assert compare(accepted, projected) == []


def test_batches_cover_every_item_once() -> None:
    assert list(batches(0)) == []
    assert list(batches(250_001)) == [(1, 100_000), (100_001, 200_000), (200_001, 250_001)]


def test_the_seed_marks_every_50th_item_split_and_states_its_mix() -> None:
    assert [g for g in range(1, 201) if was_split(g)] == [50, 100, 150, 200]
    assert item_id(50) == "seed-0000050"
    assert MIX == {
        "items": 1.04,
        "listing_mappings": 2,
        "attribute_values": 4,
        "splits": 0.02,
        "shipping_policy_versions": 0.2,
    }


def test_the_check_covers_every_projection_the_seed_writes() -> None:
    assert [c.name for c in CHECKS] == [
        "catalog_item",
        "listing_mapping",
        "shipping_policy_version",
        "item_split",
        "attribute_definition",
        "attribute_value",
        "search_document",
    ]


def test_p99_is_the_nearest_rank_and_the_ratio_is_rebuild_over_baseline() -> None:
    baseline = summarize([float(ms) for ms in range(1, 201)], seconds=2.0)
    assert (baseline.events, baseline.eps) == (200, 100.0)
    assert baseline.p50_ms == 100.0 and baseline.p99_ms == 198.0 and baseline.max_ms == 200.0
    during = summarize([10.0] * 98 + [396.0, 1000.0], seconds=0.5)
    assert during.p99_ms == 396.0 and during.eps == 200.0
    assert p99_ratio(during, baseline) == 2.0
    # Nothing measured on either side is no ratio, not a division by zero.
    assert summarize([], 5.0) == LiveLatency(0, 0.0, 0.0, 0.0, 0.0)
    assert p99_ratio(during, summarize([], 5.0)) == 0.0
    assert p99_ratio(summarize([], 5.0), baseline) == 0.0


def test_the_eta_error_is_the_distance_to_the_real_end_over_the_whole_rebuild() -> None:
    requested = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
    end = requested + timedelta(seconds=40)
    assert eta_error_pct(requested, end, end) == 0.0
    assert eta_error_pct(requested, end - timedelta(seconds=4), end) == pytest.approx(10.0)
    assert eta_error_pct(requested, end + timedelta(seconds=10), end) == pytest.approx(25.0)
    assert eta_error_pct(requested, requested, requested) == 0.0


def test_the_takeover_is_the_worst_measured_and_a_claim_names_its_worker() -> None:
    takeovers = [
        Takeover("exporting", "h-1", 1.25, "h-2"),
        Takeover("loading", "h-2", 3.5, "h-1"),
        Takeover("catching_up", "", None),
    ]
    assert worst(takeovers) == 3.5
    assert worst([Takeover("loading", "", None)]) is None
    d = figures(takeovers=tuple(takeovers)).as_dict()
    assert d["rebuild_takeover_s"] == 3.5
    assert d["rebuild_takeover_by_phase_s"] == {
        "exporting": 1.25,
        "loading": 3.5,
        "catching_up": None,
    }
    assert worker_of(None, []) is None and worker_of("no-such-pid", []) is None


def test_the_table_judges_the_live_cost_the_takeover_and_shows_the_eta() -> None:
    table = render_rebuild_table(
        figures(
            live=LiveLatency(1000, 200.0, 20.0, 80.0, 150.0),
            baseline=LiveLatency(4000, 200.0, 15.0, 40.0, 60.0),
            baseline_s=20.0,
            live_eps_offered=200.0,
            takeovers=(Takeover("exporting", "h-1", 1.25, "h-2"), Takeover("loading", "", None)),
            eta_error_pct=12.34,
        )
    )
    assert "80.0 ms during the rebuild" in table and "40.0 ms with none running" in table
    assert "ratio 2.00 (target <= 2: met)" in table
    assert "exporting 1.25 s, loading missed; worst 1.25 s (target <= 10 s: met)" in table
    assert "12.3 % of the rebuild's time off" in table
    assert "(target <= 1024 MB: met)" in table
    bare = render_rebuild_table(figures())
    assert "takeover: not measured" in bare and "ETA at halfway: not estimated" in bare
    # Nothing measured is not a ratio that meets its target.
    assert "(target <= 2: MISSED)" in bare


T0 = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def row_in(phase: str) -> RebuildRow:
    return RebuildRow(
        uuid.uuid4(), "product-applier", StreamId("t", "c", 1), phase, 1, "shadow", 2,
        None, None, 100, None, 3, 2, 1000, "bench", "test", None, None, T0, T0, None,
        None, None, None, {}, None,
    )  # fmt: skip


def test_the_eta_sample_is_the_first_estimate_at_halfway_while_under_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    estimates = iter(
        [Progress(0.3, 100.0, 10.0), Progress(0.6, 100.0, 8.0), Progress(0.9, 100.0, 1.0)]
    )
    monkeypatch.setattr(rebuild_eta, "estimate", lambda _row, _now: next(estimates))
    sample = EtaSample(T0)
    assert sample.error_pct(T0 + timedelta(seconds=20)) is None  # nothing sampled yet
    for second in (2, 4, 6):
        sample.observe(row_in("loading"), T0 + timedelta(seconds=second))
    assert sample.predicted_end == T0 + timedelta(seconds=12) and sample.fraction == 0.6
    # Ended at 15 s: 3 s off a 15 s rebuild.
    assert sample.error_pct(T0 + timedelta(seconds=15)) == pytest.approx(20.0)


def test_a_finished_rebuild_is_no_sample_of_its_eta() -> None:
    sample = EtaSample(T0)
    for phase in ("done", "failed", "cancelled"):
        sample.observe(row_in(phase), T0 + timedelta(seconds=5))
    assert sample.predicted_end is None


def test_live_latencies_fall_in_the_quarter_and_the_phase_they_were_committed_in() -> None:
    window = Window(T0, T0 + timedelta(seconds=40))
    found = [(T0 + timedelta(seconds=s), float(s)) for s in (0, 5, 12, 25, 39, 40)]
    phases = [("exporting", T0 + timedelta(seconds=4)), ("loading", T0 + timedelta(seconds=20))]
    quarters, by_phase = slices(found, window, phases)
    assert quarters == [[0.0, 5.0], [12.0], [25.0], [39.0, 40.0]]
    assert by_phase == {"exporting": [5.0, 12.0], "loading": [25.0, 39.0, 40.0]}
    d = summarize([ms for _at, ms in found], 40.0, 0, quarters, by_phase)
    assert d.p99_by_quarter_ms == (5.0, 12.0, 25.0, 40.0)
    assert d.p99_by_phase_ms == {"exporting": 12.0, "loading": 40.0}
