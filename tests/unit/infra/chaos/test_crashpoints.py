"""A crash point dies on the pass it was armed for, before or after the call."""

from __future__ import annotations

import types

import pytest

from infra.chaos import crashpoints
from infra.chaos.crashpoints import POINTS, Point


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
