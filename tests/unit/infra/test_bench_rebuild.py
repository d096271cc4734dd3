"""The rebuild bench's pure parts: its figures (JSON and table), the streamed row
comparison, and the seed's COPY lines."""

from __future__ import annotations

import json

from infra.bench.rebuild_check import StreamedComparison, compare_rows
from infra.bench.rebuild_report import Memory, RebuildFigures, render_rebuild_table
from infra.bench.rebuild_seed import batches, item_copy_line
from infra.demo.projection_check import Check

REQUIRED = (
    "rebuild_items",
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


def figures(items: int = 1_000_000, pause_ms: float = 12.5) -> RebuildFigures:
    return RebuildFigures(
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


def test_a_copy_line_has_product_items_columns() -> None:
    line = item_copy_line(1, "t", "c", 7, 42)
    assert line.endswith("\n")
    fields = line[:-1].split("\t")
    assert fields == [
        "1",
        "t",
        "c",
        "seed-0000007",
        "lamp",
        "active",
        "Seeded item 7",
        "\\N",
        '{"colour": "green", "size": "43"}',
        "1",
        "42",
    ]
