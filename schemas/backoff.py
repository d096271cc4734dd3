"""The one jittered-backoff rule every retrying part of the pipeline uses.

It sits in ``schemas``, the lowest layer, so both sides (``producers`` and
``processors``) can import it downward. ``backoff_seconds`` is the rule;
``Reconnect`` applies it to a long-running loop that lost its database: consecutive
failures widen the pause up to a cap, the first success resets it, and the jitter
keeps processes that lost the same server from coming back in lockstep.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


def backoff_seconds(
    attempts: int, base: float, cap: float, rng: random.Random | None = None
) -> float:
    """Delay before the next attempt after ``attempts`` attempts: exponential, capped,
    with "equal jitter" (half fixed, half random), so retries of many items spread
    out yet never come back immediately."""
    ceiling = min(cap, base * 2.0 ** min(max(attempts - 1, 0), 32))
    jitter: float = (rng or random).uniform(0, ceiling / 2)
    return ceiling / 2 + jitter


@dataclass(slots=True)
class Reconnect:
    """Bounded, jittered backoff between attempts of a loop at its connection.

    ``failed()`` counts one more consecutive failure and returns how long to pause
    before the next attempt (``backoff_seconds``: never more than ``cap_seconds``);
    ``succeeded()`` resets the count. ``connected`` is what a health endpoint reports:
    false from the first failure until the next success.
    """

    base_seconds: float = 0.2
    cap_seconds: float = 5.0
    failures: int = 0
    rng: random.Random = field(default_factory=random.Random)

    @property
    def connected(self) -> bool:
        return self.failures == 0

    def failed(self) -> float:
        self.failures += 1
        return backoff_seconds(self.failures, self.base_seconds, self.cap_seconds, self.rng)

    def succeeded(self) -> None:
        self.failures = 0
