"""``infra.rebuild_text``: a rebuild's progress as ``gapless rebuild status`` and
``--wait`` show it, and its ``--json`` keys."""

from __future__ import annotations

from infra.rebuild_text import duration, line, progress_text, record
from processors.rebuild.progress import Progress, estimate
from tests.unit.processors.rebuild.rows import NOW, rebuild_row

LOADING = rebuild_row(
    "loading",
    rows_total=478_000,
    rows_loaded=120_000,
    rows_by_kind={"listing_mapping": 478_000},
    load_cost={"listing_mapping": {"rows": 120_000, "seconds": 120_000 / 9_800}},
)


def test_the_loading_line_shows_rows_share_rate_and_eta() -> None:
    assert progress_text(LOADING, estimate(LOADING, NOW)) == (
        "loading, rows 120,000 / 478,000 (25 %), 9,800 rows/s, ETA 37 s"
    )
    shown = line(LOADING, NOW, {"rows_exported": 478_000})
    assert "loading, rows 120,000 / 478,000 (25 %), 9,800 rows/s, ETA 37 s" in shown
    assert "chunks 0/10" in shown and "exported 478,000 rows" in shown


def test_other_phases() -> None:
    assert progress_text(rebuild_row("exporting"), Progress(0.0, None, None)) == "exporting"
    catching = rebuild_row("catching_up", rows_total=10, rows_loaded=10)
    assert progress_text(catching, Progress(0.9, 2000.0, 130.0, "events")) == (
        "catching_up, rows 10 / 10 (90 %), 2,000 events/s, ETA 2 min 10 s"
    )
    done = rebuild_row("done", rows_total=10, rows_loaded=10)
    assert progress_text(done, estimate(done, NOW)) == "done, rows 10 / 10 (100 %)"


def test_json_carries_the_progress_keys() -> None:
    got = record(LOADING, NOW)
    assert got["rows_total"] == 478_000
    assert got["progress_fraction"] == 0.2510
    assert got["rate_rows_per_s"] == 9800.0
    assert got["eta_s"] == 36.5
    assert got["rate_of"] == "rows"
    assert record(rebuild_row("exporting"), NOW)["eta_s"] is None


def test_durations() -> None:
    assert [duration(s) for s in (0.4, 37, 119.6, 250, 7500)] == [
        "0 s",
        "37 s",
        "2 min 0 s",
        "4 min 10 s",
        "2 h 5 min",
    ]


def test_a_restarted_rebuild_shows_no_total_until_its_new_export_loads() -> None:
    restarted = rebuild_row("exporting", attempt=2, rows_total=478_000, rows_loaded=0)
    assert record(restarted, NOW)["rows_total"] is None
    assert progress_text(restarted, estimate(restarted, NOW)) == "exporting"
