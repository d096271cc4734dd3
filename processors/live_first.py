"""Live work first: a rebuild in an agents process steps aside for the live batches.

A rebuild's steps run in the same process as the live events consumers (a thread of
the agents worker), and its catch-up is Python work (decoding, folding) as a live
batch is. Two threads of one process share one interpreter lock: while the shadow
applies a page, every time a live batch comes back from PostgreSQL or Kafka it waits
for the lock, up to the switch interval each time, so a batch of a few milliseconds
takes tens. The live consumers mark each batch (``live``); between its pages and
chunks a rebuild waits while a batch is in flight (``yield_to_live``), at most
``max_wait_s`` so that it never starves: a stream with no gap between batches still
sees its rebuild go on, at a lower pace. While rebuild work runs (``background``),
the process's switch interval is ``SWITCH_INTERVAL_S``, and Python's own again
after it: at 1 ms all the time, the deployed agents caught a backlog up about a fifth
slower (``gapless bench``: agents_ratio 0.82 - 0.84 against 1.01 at 5 ms).

It orders work within one process only; what another process or PostgreSQL does on
the same cores is the throttles' business (``GAPLESS_REBUILD_CATCHUP_MAX_EVENTS_PER_
SECOND``). Nothing durable depends on it: a crash loses only the counts, which start
at zero.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

SWITCH_INTERVAL_S = 0.001
"""The interpreter's switch interval while rebuild work runs (Python's default: 5 ms):
how long a thread that wants the lock waits before the one holding it is asked to let
go. A live batch takes and gives the lock back at each round trip to PostgreSQL or
Kafka; at 5 ms a batch under a busy rebuild thread paid up to that at each."""


class LiveFirst:
    """Counts the live batches in flight; lets background work wait for none."""

    def __init__(self, max_wait_s: float = 0.25) -> None:
        self.max_wait_s = max_wait_s
        self._in_flight = 0
        self._background = 0
        self._interval_before = sys.getswitchinterval()
        self._idle = threading.Condition()
        self.waited_s = 0.0
        """Seconds background work has waited in all (for the metrics and the tests)."""

    @contextmanager
    def live(self) -> Iterator[None]:
        """Around one live batch."""
        with self._idle:
            self._in_flight += 1
        try:
            yield
        finally:
            with self._idle:
                self._in_flight -= 1
                if self._in_flight == 0:
                    self._idle.notify_all()

    @contextmanager
    def background(self) -> Iterator[None]:
        """Around rebuild work: the short switch interval while any runs (the
        interval is the process's; the one in place before the first is put back
        after the last)."""
        with self._idle:
            if self._background == 0:
                self._interval_before = sys.getswitchinterval()
                sys.setswitchinterval(SWITCH_INTERVAL_S)
            self._background += 1
        try:
            yield
        finally:
            with self._idle:
                self._background -= 1
                if self._background == 0:
                    sys.setswitchinterval(self._interval_before)

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def yield_to_live(self) -> float:
        """Wait until no live batch is in flight, at most ``max_wait_s``; the seconds
        waited."""
        began = time.monotonic()
        with self._idle:
            self._idle.wait_for(lambda: self._in_flight == 0, timeout=self.max_wait_s)
        waited = time.monotonic() - began
        self.waited_s += waited
        return waited


NO_LIVE_WORK = LiveFirst(max_wait_s=0.0)
"""For a process with no live consumers (tests, tools): never waits."""
