"""The memory bench's and the capture-worker phase's pure parts: the outbox seed's
Avro assembly against the codec, the memory figures and their flat rule, and the
product mix of the capture the worker settles."""

from __future__ import annotations

import json
import uuid

import pytest

from infra.bench.capture_worker import REVIEW_EVERY, capture_body, known_feed, measured_feed
from infra.bench.memory_report import ProcessMemory, Sample, render_memory_table
from infra.bench.outbox_seed import avro_long, avro_string, envelope, template
from schemas.codec import CODEC


@pytest.mark.parametrize(
    ("n", "encoded"),
    [(0, b"\x00"), (1, b"\x02"), (63, b"\x7e"), (64, b"\x80\x01"), (8192, b"\x80\x80\x01")],
)
def test_avro_longs_are_zigzag_varints(n: int, encoded: bytes) -> None:
    assert avro_long(n) == encoded


def test_avro_strings_carry_their_utf8_length() -> None:
    assert avro_string("é1") == b"\x06" + "é1".encode()


@pytest.mark.parametrize("position", [1, 2, 63, 64, 127, 128, 8191, 8192, 125_000, 2**40])
def test_the_seed_assembles_the_codecs_bytes_at_every_position(position: int) -> None:
    t = template("bench-run1-m0", "catalog1")
    event_id = uuid.uuid4()
    expected = envelope("bench-run1-m0", "catalog1", position, event_id)
    value = t.assemble(position, event_id)
    assert value == CODEC.encode_value(expected)
    decoded = CODEC.decode_value(value)
    assert (decoded.position, decoded.event_id, decoded.aggregate.id) == (
        position,
        event_id,
        f"item-{position}",
    )


def memory(rss: list[float], events: int = 1000) -> ProcessMemory:
    step = events // (len(rss) - 1)
    samples = [Sample(float(i), min(events, i * step), mb) for i, mb in enumerate(rss)]
    return ProcessMemory("agents", events, rss[0], max(rss), samples)


def test_rss_is_read_at_the_first_sample_past_each_mark() -> None:
    m = memory([100, 150, 151, 152, 153, 154, 155, 156, 157, 158, 160])
    assert (m.at(10).rss_mb, m.at(50).rss_mb, m.at(100).rss_mb) == (150, 154, 160)
    assert m.flat and m.growth == pytest.approx(160 / 150 - 1)


def test_memory_that_grows_past_the_rule_is_not_flat() -> None:
    m = memory([100, 150, 170, 190, 210])
    assert not m.flat
    assert "not flat (+40% from 10 % to 100 %" in m.verdict


def test_the_memory_figures_name_every_mark_and_the_samples() -> None:
    d = memory([100, 150, 151, 152, 160]).as_dict()
    for key in ("agents_peak_rss_mb", "agents_rss_start_mb", "agents_flat", "agents_eps"):
        assert key in d
    assert [d[f"agents_rss_{mark}_mb"] for mark in (10, 50, 100)] == [150, 151, 160]
    assert d["agents_samples"][-1] == [4.0, 1000, 160]
    json.dumps(d)
    env = {"cores": 2, "postgres": "15", "loadavg_start": [1, 1, 1], "loadavg_end": [2, 2, 2]}
    table = render_memory_table(1000, 1.5, memory([90, 90, 90]), memory([100, 150, 160]), env)
    assert "flat" in table and "agents" in table


def test_the_measured_capture_mixes_known_new_and_unidentifiable_products() -> None:
    known, products = 100, 1000
    first = {p["id"]: p for p in known_feed(known)}
    measured = measured_feed(products, known)
    assert len(measured) == products and len({p["id"] for p in measured}) == products
    again = [p for p in measured if p["id"] in first]
    changed = [p for p in again if p["attributes"] != first[p["id"]]["attributes"]]
    assert len(again) == known and len(changed) == known // 2
    assert all(p == first[p["id"]] for p in again if p not in changed)
    without_gtin = [p for p in measured if "gtin" not in p]
    assert len(without_gtin) == (products - known) // REVIEW_EVERY
    assert all(p["id"] not in first for p in without_gtin)
    body = capture_body(measured)
    assert body["content_type"] == "application/json" and body["artifact"]
