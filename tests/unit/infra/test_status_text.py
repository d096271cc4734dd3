"""How ``gapless status`` writes a duration for a person."""

from __future__ import annotations

import pytest

from infra.status import seconds


@pytest.mark.parametrize(
    ("value", "shown"),
    [(0.04, "0.0s"), (9.96, "10s"), (12.4, "12s"), (185, "3m05s"), (7620, "2h07m")],
)
def test_durations_read_as_a_person_would_say_them(value: float, shown: str) -> None:
    assert seconds(value) == shown
