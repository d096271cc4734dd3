"""The campaign's judge: fed crafted violations, it reports each one (and a clean run
as clean), so a campaign that passes could have failed."""

from __future__ import annotations

import dataclasses

import pytest

from infra.chaos.check import Observations, Seen, StreamFacts, judge

POISON = b"\x00poison"


def _stream(name: str = "t1", committed: int = 10, **changes: object) -> StreamFacts:
    clean = StreamFacts(
        stream=(name, "c1", 1),
        committed=committed,
        published=committed,
        fenced=False,
        on_topic=frozenset(range(1, committed + 1)),
        progress=committed,
        applied=committed,
        inbox_doubles=0,
    )
    return dataclasses.replace(clean, **changes)  # type: ignore[arg-type]


def _observed(*streams: StreamFacts, **changes: object) -> Observations:
    clean = Observations(
        streams=list(streams) or [_stream()],
        jobs={"job-1": "done", "job-2": "skipped"},
        quarantined=[POISON],
        poison=[POISON],
        rows_compared=40,
    )
    return dataclasses.replace(clean, **changes)  # type: ignore[arg-type]


def _seen(**changes: object) -> Seen:
    clean = Seen(rebuild_phase="done", fence_done=True, converged=True)
    return dataclasses.replace(clean, **changes)  # type: ignore[arg-type]


def test_a_clean_run_has_no_violation() -> None:
    verdict = judge(_observed(_stream("t1"), _stream("t2", 5)), _seen())
    assert verdict.ok, verdict.violations
    assert verdict.events_committed == 15
    assert (verdict.lost, verdict.doubled, verdict.mismatched_rows) == (0, 0, 0)


def test_a_position_missing_from_the_topic_is_lost() -> None:
    verdict = judge(_observed(_stream(on_topic=frozenset({1, 2, 3, 5, 6, 7, 8, 9, 10}))), _seen())
    assert verdict.lost == 1
    assert any(v.startswith("lost: t1/c1/1 positions 4") for v in verdict.violations)


def test_progress_short_of_the_cursor_is_lost() -> None:
    verdict = judge(_observed(_stream(progress=7, applied=7)), _seen())
    assert verdict.lost == 3
    assert "lost: t1/c1/1 positions 8-10" in verdict.violations


def test_a_committed_event_never_published_is_lost() -> None:
    verdict = judge(_observed(_stream(published=8, on_topic=frozenset(range(1, 9)))), _seen())
    assert verdict.lost == 2


def test_a_fenced_streams_unpublished_tail_is_history_not_loss() -> None:
    fenced = _stream(fenced=True, published=6, on_topic=frozenset(range(1, 7)), progress=4)
    assert judge(_observed(fenced), _seen()).ok


def test_an_event_applied_twice_is_doubled() -> None:
    verdict = judge(_observed(_stream(applied=11)), _seen())
    assert verdict.doubled == 1
    verdict = judge(_observed(_stream(inbox_doubles=2)), _seen())
    assert verdict.doubled == 2
    assert any(v.startswith("doubled:") for v in verdict.violations)


def test_mismatched_rows_are_reported() -> None:
    verdict = judge(_observed(mismatches=["catalog_item t1/c1/i1: …", "listing …"]), _seen())
    assert verdict.mismatched_rows == 2
    assert "mismatch: catalog_item t1/c1/i1: …" in verdict.violations


def test_nothing_compared_is_a_violation() -> None:
    assert not judge(_observed(rows_compared=0), _seen()).ok


def test_a_capture_job_not_settled_is_stuck() -> None:
    verdict = judge(_observed(jobs={"job-1": "done", "job-2": "running"}), _seen())
    assert verdict.stuck_jobs == 1
    assert not judge(_observed(jobs={"job-1": "failed"}), _seen()).ok


def test_only_poison_may_be_quarantined() -> None:
    verdict = judge(_observed(quarantined=[POISON, b"a real event"]), _seen())
    assert verdict.unexpected_quarantine == 1
    assert not judge(_observed(quarantined=[]), _seen()).ok  # poison let through


@pytest.mark.parametrize(
    ("seen", "starts"),
    [
        (_seen(regressions=["progress t1/c1/1 went back from 9 to 4"]), "regression:"),
        (_seen(exited_on_their_own=["relay-1 exited with status 1"]), "exited on its own:"),
        (_seen(workload_errors=["writers: boom"]), "workload:"),
        (_seen(rebuild_phase="failed"), "rebuild:"),
        (_seen(fence_done=False), "fence:"),
        (_seen(converged=False), "convergence:"),
        (
            _seen(lane_workers=3, lane_most_workers=3, lane_unreached=["rebuild.cutover.swapped"]),
            "rebuild lane: no worker died at rebuild.cutover.swapped",
        ),
        (_seen(lane_workers=3, lane_most_workers=1), "rebuild lane: no rebuild lost two"),
    ],
)
def test_what_the_campaign_saw_is_judged_too(seen: Seen, starts: str) -> None:
    verdict = judge(_observed(), seen)
    assert [v for v in verdict.violations if v.startswith(starts)], verdict.violations
    if starts == "regression:":
        assert verdict.progress_regressions == 1


def test_a_rebuild_lane_that_reached_every_point_with_two_workers_is_clean() -> None:
    assert judge(_observed(), _seen(lane_workers=2, lane_most_workers=2)).ok
    # Without a lane (no agents workers armed) there is nothing to require.
    assert judge(_observed(), _seen(lane_workers=0, lane_most_workers=0)).ok
