"""A commit notifier's payload (``db.resolver.commit_notifier.payload``): the streams
of one send, one per line, within what PostgreSQL takes in a notification."""

from __future__ import annotations

from db.resolver.commit_notifier import PAYLOAD_BYTES, payload


def test_a_send_names_its_streams_one_per_line_in_order() -> None:
    assert payload(["t1/c1@1"]) == "t1/c1@1"
    assert payload(["t1/c1@1", "t2/c1@3"]) == "t1/c1@1\nt2/c1@3"


def test_streams_beyond_what_a_notification_holds_are_counted_not_named() -> None:
    streams = [f"tenant-{n:05d}/catalog-é@1" for n in range(1_000)]
    text = payload(streams)
    lines = text.split("\n")
    assert len(text.encode()) < 8_000 and len(text.encode()) <= PAYLOAD_BYTES
    assert lines[:-1] == streams[: len(lines) - 1]
    assert lines[-1] == f"… and {1_000 - (len(lines) - 1)} more"
