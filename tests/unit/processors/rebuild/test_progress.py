"""``processors.rebuild.progress.estimate``: the rebuild's fraction, rate and ETA from
its row alone (no database)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from processors.rebuild.progress import (
    ASSUMED_CATCHUP_EVENTS_PER_S,
    DOCUMENT_COST,
    PRIOR_COST,
    Progress,
    estimate,
)
from tests.unit.processors.rebuild.rows import NOW, rebuild_row


@pytest.mark.parametrize("phase", ["requested", "leased", "exporting"])
def test_before_the_load_nothing_is_known(phase: str) -> None:
    assert estimate(rebuild_row(phase), NOW) == Progress(0.0, None, None)


def test_loading_one_kind_at_its_measured_rate() -> None:
    row = rebuild_row(
        "loading",
        rows_total=400_000,
        rows_loaded=100_000,
        rows_by_kind={"listing_mapping": 400_000},
        load_cost={"listing_mapping": {"rows": 100_000, "seconds": 10.0}},
    )
    p = estimate(row, NOW)
    assert p.rate_rows_s == pytest.approx(10_000)
    assert p.eta_s == pytest.approx(30.0)
    assert p.fraction == pytest.approx(0.25)
    assert p.rate_of == "rows"


def test_kinds_weigh_by_their_measured_cost() -> None:
    """Items cost 2x what mappings do here: the items left weigh twice as much."""
    row = rebuild_row(
        "loading",
        rows_total=300_000,
        rows_loaded=150_000,
        rows_by_kind={"catalog_item": 100_000, "listing_mapping": 200_000},
        load_cost={
            "catalog_item": {"rows": 50_000, "seconds": 10.0},
            "listing_mapping": {"rows": 100_000, "seconds": 10.0},
        },
    )
    p = estimate(row, NOW)
    # left: 50,000 items at 0.2 ms + 100,000 mappings at 0.1 ms, then a document
    # for each of the 100,000 items at DOCUMENT_COST items' cost
    documents = 100_000 * 0.0002 * DOCUMENT_COST
    assert p.eta_s == pytest.approx(20.0 + documents)
    assert p.fraction == pytest.approx(20.0 / (40.0 + documents))
    assert p.rate_rows_s == pytest.approx(7_500)


def test_a_kind_not_reached_costs_the_measured_mean_times_its_prior() -> None:
    row = rebuild_row(
        "loading",
        rows_total=300_000,
        rows_loaded=100_000,
        rows_by_kind={"catalog_item": 100_000, "listing_mapping": 200_000},
        load_cost={"catalog_item": {"rows": 100_000, "seconds": 20.0}},
    )
    ratio = PRIOR_COST["listing_mapping"] / PRIOR_COST["catalog_item"]
    documents = 100_000 * 0.0002 * DOCUMENT_COST
    assert estimate(row, NOW).eta_s == pytest.approx(200_000 * 0.0002 * ratio + documents)


def test_loading_counts_the_catch_up_the_live_stream_makes() -> None:
    """W at 1,000, the live consumer at 8,000: 7,000 positions already to catch up, plus
    what the stream adds at its rate (7,000 in the 10 s exporting and 20 s loading)
    during the 30 s left of loading."""
    row = rebuild_row(
        "loading",
        rows_total=400_000,
        rows_loaded=100_000,
        rows_by_kind={"listing_mapping": 400_000},
        load_cost={"listing_mapping": {"rows": 100_000, "seconds": 10.0}},
        live_position=8000,
    )
    catchup = (7000 + 7000 / 30 * 30.0) / ASSUMED_CATCHUP_EVENTS_PER_S
    p = estimate(row, NOW)
    assert p.eta_s == pytest.approx(30.0 + catchup)
    assert p.fraction == pytest.approx(10.0 / (10.0 + 30.0 + catchup))


def test_no_chunk_measured_yet_no_eta() -> None:
    row = rebuild_row("loading", rows_total=400_000, rows_by_kind={"catalog_item": 400_000})
    p = estimate(row, NOW)
    assert (p.fraction, p.rate_rows_s, p.eta_s) == (0.0, None, None)


def test_a_row_without_costs_uses_the_phase_mean_rate() -> None:
    row = rebuild_row("loading", rows_total=400_000, rows_loaded=100_000)
    p = estimate(row, NOW)
    assert p.rate_rows_s == pytest.approx(100_000 / 20)
    assert p.eta_s == pytest.approx(60.0)
    assert p.fraction == pytest.approx(0.25)


def test_catching_up_at_its_measured_rate_to_the_target() -> None:
    row = rebuild_row(
        "catching_up",
        rows_total=100_000,
        rows_loaded=100_000,
        rows_by_kind={"listing_mapping": 100_000},
        load_cost={"listing_mapping": {"rows": 100_000, "seconds": 10.0}},
        caught_up_position=5000,
        target_position=9000,
        live_position=9500,
        phase_started_at=NOW - timedelta(seconds=2),
    )
    p = estimate(row, NOW)
    assert p.rate_of == "events"
    assert p.rate_rows_s == pytest.approx(2000)
    assert p.eta_s == pytest.approx(2.0)
    assert p.fraction == pytest.approx(12.0 / 14.0)


def test_catching_up_before_any_page_assumes_the_rate() -> None:
    row = rebuild_row(
        "catching_up",
        load_cost={"catalog_item": {"rows": 100, "seconds": 1.0}},
        live_position=1000 + int(ASSUMED_CATCHUP_EVENTS_PER_S),
    )
    p = estimate(row, NOW)
    assert p.rate_rows_s is None
    assert p.eta_s == pytest.approx(1.0)
    assert p.fraction == pytest.approx(0.5)


def test_the_fraction_moves_from_0_to_1_through_the_phases() -> None:
    fractions = []
    for phase, loaded, caught in [
        ("exporting", 0, None),
        ("loading", 0, None),
        ("loading", 50, None),
        ("loading", 100, None),
        ("catching_up", 100, 1100),
        ("cutting_over", 100, 1200),
        ("done", 100, 1200),
    ]:
        cost = {"catalog_item": {"rows": loaded, "seconds": loaded / 10}}
        row = rebuild_row(
            phase,
            rows_total=100,
            rows_loaded=loaded,
            rows_by_kind={"catalog_item": 100},
            load_cost=cost,
            caught_up_position=caught,
            target_position=1200 if caught else None,
            live_position=1200,
            # the catch-up at the assumed rate, the load at the rows' rate
            phase_started_at=NOW
            - timedelta(seconds=100 / ASSUMED_CATCHUP_EVENTS_PER_S if caught else loaded / 10),
        )
        fractions.append(estimate(row, NOW).fraction)
    assert fractions[0] == 0.0 and fractions[-1] == 1.0
    assert fractions == sorted(fractions)
    assert 0.0 < fractions[2] < fractions[3] < 1.0


def test_finished_rebuilds() -> None:
    assert estimate(rebuild_row("done"), NOW) == Progress(1.0, None, 0.0)
    failed = estimate(rebuild_row("failed", rows_total=100, rows_loaded=40), NOW)
    assert (failed.fraction, failed.eta_s) == (0.4, None)


def test_the_figures_are_the_rows_last_update_and_the_eta_counts_down_from_it() -> None:
    """The catch-up recorded 4,000 positions in the 2 s to its last update; read 1.5 s
    later, the rate is still 2,000/s (not 4,000 over 3.5 s) and 1.5 s of the 2 s are
    gone; read long after, the ETA stays at 0."""
    row = rebuild_row(
        "catching_up",
        caught_up_position=5000,
        target_position=9000,
        phase_started_at=NOW - timedelta(seconds=2),
        updated_at=NOW,
    )
    later = estimate(row, NOW + timedelta(seconds=1.5))
    assert later.rate_rows_s == pytest.approx(2000)
    assert later.eta_s == pytest.approx(0.5)
    assert estimate(row, NOW + timedelta(seconds=60)).eta_s == 0.0


def test_while_loading_the_eta_counts_down_by_one_chunk_at_most() -> None:
    """4 chunks of 25,000 rows took 10 s: 30 s left as of the update; 1 s later 29 s,
    a minute later 27.5 s (the chunk in flight, 2.5 s, is all that can have loaded)."""
    row = rebuild_row(
        "loading",
        rows_total=400_000,
        rows_loaded=100_000,
        chunks_loaded=4,
        rows_by_kind={"listing_mapping": 400_000},
        load_cost={"listing_mapping": {"rows": 100_000, "seconds": 10.0}},
    )
    assert estimate(row, NOW + timedelta(seconds=1)).eta_s == pytest.approx(29.0)
    assert estimate(row, NOW + timedelta(seconds=60)).eta_s == pytest.approx(27.5)


def test_the_documents_are_left_until_the_load_ends_and_done_after_it() -> None:
    """Every chunk loaded: the documents' build is all that is left of the load; once
    the phase is catching up it counts as done."""
    loaded = {"catalog_item": {"rows": 100_000, "seconds": 10.0}}
    row = rebuild_row(
        "loading",
        rows_total=100_000,
        rows_loaded=100_000,
        chunks_loaded=4,
        rows_by_kind={"catalog_item": 100_000},
        load_cost=loaded,
    )
    documents = 10.0 * DOCUMENT_COST
    p = estimate(row, NOW)
    assert p.eta_s == pytest.approx(documents)
    assert p.fraction == pytest.approx(10.0 / (10.0 + documents))
    after = rebuild_row(
        "catching_up",
        rows_total=100_000,
        rows_loaded=100_000,
        rows_by_kind={"catalog_item": 100_000},
        load_cost=loaded,
        caught_up_position=1000,
        target_position=1000 + int(ASSUMED_CATCHUP_EVENTS_PER_S),
    )
    q = estimate(after, NOW)
    assert q.eta_s == pytest.approx(1.0)
    assert q.fraction == pytest.approx((10.0 + documents) / (11.0 + documents))
