"""Progress sampled throughout: any value below the highest seen is a regression."""

from __future__ import annotations

from infra.chaos.sampler import Monotone


def test_progress_that_only_moves_forward_is_fine() -> None:
    seen = Monotone()
    seen.observe("progress", [(("c", "t1"), 1), (("c", "t2"), 5)])
    seen.observe("progress", [(("c", "t1"), 1), (("c", "t2"), 9)])
    assert seen.regressions == []


def test_a_step_back_is_a_regression_even_after_it_recovers() -> None:
    seen = Monotone()
    for value in (3, 8, 6, 9):
        seen.observe("progress", [(("c", "t1"), value)])
    assert [(r.highest, r.seen) for r in seen.regressions] == [(8, 6)]
    assert str(seen.regressions[0]) == "progress c/t1 went back from 8 to 6"


def test_each_kind_of_figure_is_its_own() -> None:
    seen = Monotone()
    seen.observe("progress", [(("t1",), 8)])
    seen.observe("published", [(("t1",), 3)])
    assert seen.regressions == []
