"""The retry budget: how many attempts a product (or a job) gets, and how long to
wait between them (exponential backoff with jitter, capped)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from producers.capture.rules import backoff_seconds


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int
    base_seconds: float
    cap_seconds: float

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("a retry budget allows at least one attempt")

    def delay_after(self, attempts: int, rng: random.Random | None = None) -> float | None:
        """Seconds to wait before the next attempt once ``attempts`` attempts have
        failed; None when the budget is spent (the failure is left for an operator)."""
        if attempts >= self.max_attempts:
            return None
        return backoff_seconds(attempts, self.base_seconds, self.cap_seconds, rng)
