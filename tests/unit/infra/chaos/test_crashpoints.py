"""A crash point dies on the pass it was armed for, before or after the call, counting
only the calls of its window; a point armed once through a ledger kills the first
process to reach it and nobody after."""

from __future__ import annotations

import os
import types
from pathlib import Path

import pytest

from infra.chaos import crashpoints
from infra.chaos.crashpoints import CUTOVER_POINTS, POINTS, REBUILD_POINTS, Call, Ledger, Point


class _Died(Exception):
    pass


def _die() -> None:
    raise _Died


@pytest.fixture()
def module(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    fake = types.ModuleType("fake_step")
    calls: list[int] = []

    def step(n: int) -> int:
        calls.append(n)
        return n

    fake.step = step  # type: ignore[attr-defined]
    fake.calls = calls  # type: ignore[attr-defined]
    monkeypatch.setitem(__import__("sys").modules, "fake_step", fake)
    return fake


@pytest.mark.parametrize("before", [True, False])
def test_it_dies_on_the_armed_pass(
    module: types.ModuleType, monkeypatch: pytest.MonkeyPatch, before: bool
) -> None:
    monkeypatch.setitem(POINTS, "fake.step", Point("fake_step", None, "step", before=before))
    crashpoints.arm("fake.step", 2, die=_die)
    assert module.step(1) == 1
    with pytest.raises(_Died):
        module.step(2)
    # Before: the second call never ran; after: it ran, then the process died.
    assert module.calls == ([1] if before else [1, 2])


def test_every_point_names_a_function_that_exists() -> None:
    import importlib

    for name, point in POINTS.items():
        holder = importlib.import_module(point.module)
        if point.owner is not None:
            holder = getattr(holder, point.owner)
        assert callable(getattr(holder, point.name)), name


def test_only_the_calls_its_condition_holds_for_count(
    module: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    even = Point("fake_step", None, "step", before=False, when=lambda c: c.result % 2 == 0)
    monkeypatch.setitem(POINTS, "fake.even", even)
    crashpoints.arm("fake.even", 2, die=_die)
    for n in (1, 2, 3, 5):
        module.step(n)  # one even call so far
    with pytest.raises(_Died):
        module.step(4)


def test_a_point_armed_once_kills_the_first_to_reach_it_and_no_one_after(
    module: types.ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Two incarnations armed with the same ledger (here two wrappers in one process):
    the first pass dies and records itself, with what the call worked on; every later
    pass, in either, goes on."""
    point = Point("fake_step", None, "step", before=True, subject=lambda c: f"n={c.args[0]}")
    monkeypatch.setitem(POINTS, "fake.once", point)
    ledger = Ledger(tmp_path, _now=lambda: 1234.5)
    crashpoints.arm_once(["fake.once"], ledger, die=_die)  # the first process
    crashpoints.arm_once(["fake.once"], ledger, die=_die)  # the second
    with pytest.raises(_Died):
        module.step(7)
    assert module.step(8) == 8 and module.step(9) == 9
    assert module.calls == [8, 9]
    reached = ledger.entries()["fake.once"]
    assert (reached.pid, reached.subject, reached.at) == (os.getpid(), "n=7", 1234.5)
    assert ledger.point_of(os.getpid()) == "fake.once"
    assert ledger.point_of(os.getpid() + 1) is None


def test_closing_the_ledger_disarms_the_points_nobody_reached(
    module: types.ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(POINTS, "fake.once", Point("fake_step", None, "step", before=False))
    ledger = Ledger(tmp_path)
    crashpoints.arm_once(["fake.once"], ledger, die=_die)
    assert ledger.close(["fake.once", "fake.other"]) == ["fake.once", "fake.other"]
    assert module.step(1) == 1  # closed: nobody dies there any more
    assert all(r.closed for r in ledger.entries().values())
    assert ledger.close(["fake.once"]) == []


def test_the_environment_arms_one_point_and_the_ledgers_points(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    armed: list[tuple[str, object]] = []
    monkeypatch.setattr(crashpoints, "arm", lambda name, passes: armed.append((name, passes)))
    monkeypatch.setattr(
        crashpoints, "arm_once", lambda names, ledger: armed.append((",".join(names), ledger))
    )
    monkeypatch.setenv(crashpoints.POINT_VARIABLE, "applier.committed")
    monkeypatch.setenv(crashpoints.PASSES_VARIABLE, "3")
    monkeypatch.setenv(crashpoints.ONCE_VARIABLE, "rebuild.claimed,rebuild.cutover.swapped")
    monkeypatch.setenv(crashpoints.LEDGER_VARIABLE, str(tmp_path))
    lines = crashpoints.arm_from_environment()
    assert armed == [
        ("applier.committed", 3),
        ("rebuild.claimed,rebuild.cutover.swapped", Ledger(tmp_path)),
    ]
    assert len(lines) == 2
    monkeypatch.delenv(crashpoints.LEDGER_VARIABLE)
    with pytest.raises(SystemExit):
        crashpoints.arm_from_environment()


def test_the_rebuild_points_count_only_the_calls_of_their_window() -> None:
    row = types.SimpleNamespace(rebuild_id="r1", phase="loading", previous_generation=None)
    swapped = types.SimpleNamespace(rebuild_id="r1", phase="cutting_over", previous_generation=1)

    def counts(name: str, call: Call) -> bool:
        when = POINTS[name].when
        return when is None or when(call)

    me = object()
    assert counts("rebuild.exporting", Call((me, row, "exporting"), {}))
    assert not counts("rebuild.exporting", Call((me, row, "loading"), {}))
    assert counts("rebuild.export_ready", Call((me, row, "loading"), {}))
    assert counts("rebuild.chunk", Call((me, row), {}))
    assert not counts("rebuild.catchup_page", Call((me, row), {}))
    assert not counts("rebuild.catchup_page", Call((me, swapped), {}))
    assert not counts("rebuild.claimed", Call((me, "r1"), {}, None))  # not claimed
    assert counts(
        "rebuild.cutover.swapped", Call((None, "r1", "cutting_over"), {"previous_generation": 1})
    )
    assert not counts(
        "rebuild.cutover.swapped", Call((None, "r1", "loading"), {"chunks_loaded": 2})
    )
    assert not counts("rebuild.cutover", Call((), {}, None))  # rolled back: nothing committed
    assert counts("rebuild.released", Call((me, swapped), {}))
    assert not counts("rebuild.released", Call((me, row), {}))
    subject = POINTS["rebuild.leased"].subject
    assert (
        subject is not None
        and subject(Call((me, ("t", "c", 1), "rebuild:r1", 300), {})) == "rebuild:r1"
    )
    assert set(REBUILD_POINTS) <= set(POINTS)
    assert CUTOVER_POINTS == (
        "rebuild.cutover.locked",
        "rebuild.cutover.swapped",
        "rebuild.cutover",
        "rebuild.released",
    )
