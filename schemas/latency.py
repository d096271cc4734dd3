"""Latency histograms counted a batch at a time, for the hot paths.

prometheus_client's ``Histogram.observe`` takes a lock and walks the buckets for every
value, about 1 µs; the relay ships a message in about 4 µs, so a histogram of every
message's latency would cost it a quarter of its rate. ``Latencies`` takes a whole
batch instead: it sorts the batch's values once and finds each bucket's cumulative
count by binary search, so the cost per value is the sort's share (tens of ns), and
the lock is taken once per batch.

What a scrape sees is exactly what a prometheus_client ``Histogram`` with the same
buckets would expose after observing the same values (``_bucket`` with ``le``,
``_sum``, ``_count``), less its ``_created`` series; a unit test holds it to that.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterable, Sequence

from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

_le: Callable[[float], str] = floatToGoString
"""How prometheus_client writes a bucket's bound (its ``le`` label)."""

PIPELINE_BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    1800.0,
)
"""Seconds, from a message's few milliseconds in a healthy pipeline to the half hour
an outage or a long pause can hold it (and ``+Inf`` above)."""


class _Series:
    __slots__ = ("counts", "total")

    def __init__(self, buckets: int) -> None:
        self.counts = [0] * buckets  # cumulative: values <= each bound
        self.total = 0.0


class Latencies(Collector):
    """A histogram family of durations in seconds, observed a batch at a time.

    ``observe(values, *labels)`` adds every value of ``values`` to the series of
    ``labels`` (one per label name). Registered with ``registry`` (the default one
    unless told) when made, as prometheus_client's own metrics are.
    """

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        buckets: Sequence[float] = PIPELINE_BUCKETS,
        registry: CollectorRegistry | None = REGISTRY,
    ) -> None:
        bounds = sorted(float(b) for b in buckets if b != float("inf"))
        if not bounds or len(set(bounds)) != len(bounds):
            raise ValueError(f"{name}: buckets must be distinct finite bounds, got {buckets}")
        self._name = name
        self._documentation = documentation
        self._labelnames = tuple(labelnames)
        self._bounds = bounds
        self._les = [_le(b) for b in bounds] + ["+Inf"]
        self._series: dict[tuple[str, ...], _Series] = {}
        self._lock = threading.Lock()
        if registry is not None:
            registry.register(self)

    def observe(self, values: Iterable[float], *labels: str) -> None:
        """Count ``values`` (seconds) into the series of ``labels``."""
        if len(labels) != len(self._labelnames):
            raise ValueError(f"{self._name}: expected labels {self._labelnames}, got {labels}")
        ordered = sorted(values)
        if not ordered:
            return
        below = [bisect.bisect_right(ordered, bound) for bound in self._bounds]
        total = sum(ordered)
        with self._lock:
            series = self._series.get(labels)
            if series is None:
                series = self._series[labels] = _Series(len(self._bounds) + 1)
            counts = series.counts
            for i, n in enumerate(below):
                counts[i] += n
            counts[-1] += len(ordered)
            series.total += total

    def describe(self) -> Iterable[Metric]:
        return [HistogramMetricFamily(self._name, self._documentation, labels=self._labelnames)]

    def collect(self) -> Iterable[Metric]:
        family = HistogramMetricFamily(self._name, self._documentation, labels=self._labelnames)
        with self._lock:
            snapshot = [(k, list(s.counts), s.total) for k, s in self._series.items()]
        for labels, counts, total in sorted(snapshot):
            family.add_metric(list(labels), list(zip(self._les, counts, strict=True)), total)
        return [family]
