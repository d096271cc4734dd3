"""``Latencies`` exposes exactly what a prometheus_client ``Histogram`` with the same
buckets would after the same values, however they are split into batches."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram

from schemas.latency import PIPELINE_BUCKETS, Latencies

seconds = st.floats(min_value=0.0, max_value=4000.0, allow_nan=False)
batches = st.lists(
    st.tuples(st.sampled_from(["a", "b"]), st.lists(seconds, max_size=30)), max_size=8
)


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in registry.collect()
        for s in family.samples
        if not s.name.endswith("_created")
    }


@given(batches)
def test_it_exposes_what_a_histogram_would(observed: list[tuple[str, list[float]]]) -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    latencies = Latencies("x_seconds", "doc", ["consumer"], registry=ours)
    histogram = Histogram(
        "x_seconds", "doc", ["consumer"], buckets=PIPELINE_BUCKETS, registry=theirs
    )
    for consumer, values in observed:
        latencies.observe(values, consumer)
        for value in values:
            histogram.labels(consumer).observe(value)
    mine, reference = samples(ours), samples(theirs)
    assert mine.keys() == reference.keys()
    for key, value in reference.items():
        assert mine[key] == pytest.approx(value), key


def test_a_bound_counts_values_equal_to_it() -> None:
    registry = CollectorRegistry()
    latencies = Latencies("y_seconds", "doc", registry=registry, buckets=[1.0, 2.0])
    latencies.observe([1.0, 1.5, 2.0, 9.0])
    assert registry.get_sample_value("y_seconds_bucket", {"le": "1.0"}) == 1
    assert registry.get_sample_value("y_seconds_bucket", {"le": "2.0"}) == 3
    assert registry.get_sample_value("y_seconds_bucket", {"le": "+Inf"}) == 4
    assert registry.get_sample_value("y_seconds_count") == 4
    assert registry.get_sample_value("y_seconds_sum") == pytest.approx(13.5)


def test_wrong_labels_and_buckets_are_refused() -> None:
    latencies = Latencies("z_seconds", "doc", ["consumer"], registry=None)
    with pytest.raises(ValueError, match="expected labels"):
        latencies.observe([1.0])
    with pytest.raises(ValueError, match="distinct finite"):
        Latencies("w_seconds", "doc", buckets=[1.0, 1.0], registry=None)
