"""How good the rebuild's ETA is: the end it predicted halfway against the real end.

While the bench follows the rebuild it passes each row it reads to ``EtaSample``,
which asks ``processors.rebuild.progress.estimate`` (what ``gapless rebuild status``,
``--wait`` and the metrics show) and keeps the first estimate whose fraction is at
least one half while the rebuild is still under way (a ``done`` row's ETA is 0 by
definition, no prediction): the predicted end is then that moment plus its ETA. Once the
rebuild is done, ``rebuild_eta_error_pct`` = |predicted end - real end| / (real end
- request) * 100: how far off, as a share of the whole rebuild. Pure: the clock is
the caller's (the bench's wall clock; the rows' timestamps are the PostgreSQL
server's, on the same host).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from db.product.rebuilds import RebuildRow
from processors.rebuild.progress import estimate

HALFWAY = 0.5
FINAL = frozenset({"done", "failed", "cancelled"})


@dataclass
class EtaSample:
    requested_at: datetime
    predicted_end: datetime | None = None
    sampled_at: datetime | None = None
    fraction: float | None = None

    def observe(self, row: RebuildRow, now: datetime) -> None:
        """Keep the first estimate at or past halfway that has an ETA."""
        if self.predicted_end is not None or row.phase in FINAL:
            return
        progress = estimate(row, now)
        if progress.fraction >= HALFWAY and progress.eta_s is not None:
            self.predicted_end = now + timedelta(seconds=progress.eta_s)
            self.sampled_at, self.fraction = now, progress.fraction

    def error_pct(self, real_end: datetime) -> float | None:
        """``eta_error_pct`` of this sample; None if no estimate reached halfway."""
        if self.predicted_end is None:
            return None
        return eta_error_pct(self.requested_at, self.predicted_end, real_end)


def eta_error_pct(requested_at: datetime, predicted_end: datetime, real_end: datetime) -> float:
    """|predicted - real end| over the rebuild's whole time (request to real end), in %."""
    whole = (real_end - requested_at).total_seconds()
    if whole <= 0:
        return 0.0
    return abs((predicted_end - real_end).total_seconds()) / whole * 100
