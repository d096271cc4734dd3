"""Running a unit of work from several threads for a while and counting what it did."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(slots=True)
class Rate:
    """``count`` things done in ``seconds`` of wall-clock time."""

    count: int = 0
    seconds: float = 0.0

    @property
    def per_second(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else 0.0

    def add(self, other: Rate) -> None:
        self.count += other.count
        self.seconds += other.seconds


Work = Callable[[int, int], int]
"""``work(thread, n)`` does its ``n``-th piece of work and returns how many events it wrote."""


def run_threads(threads: int, seconds: float, work: Work) -> Rate:
    """Call ``work`` in a loop from ``threads`` threads until ``seconds`` have passed.

    Threads start together (a barrier) and stop taking new work at the deadline; the
    clock stops when the last one finishes, so the rate counts only finished work.
    """
    counts = [0] * threads
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads + 1)
    deadline = 0.0

    def loop(index: int) -> None:
        barrier.wait()
        n = 0
        try:
            while time.perf_counter() < deadline:
                counts[index] += work(index, n)
                n += 1
        except BaseException as exc:  # re-raised in the calling thread
            errors.append(exc)

    pool = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(threads)]
    for t in pool:
        t.start()
    start = time.perf_counter()
    deadline = start + seconds
    barrier.wait()
    for t in pool:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return Rate(sum(counts), elapsed)


def run_each_once(threads: int, work: Work) -> None:
    """Call ``work(thread, 0)`` once from each of ``threads`` threads, concurrently."""
    errors: list[BaseException] = []

    def once(index: int) -> None:
        try:
            work(index, 0)
        except BaseException as exc:  # re-raised in the calling thread
            errors.append(exc)

    pool = [threading.Thread(target=once, args=(i,), daemon=True) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if errors:
        raise errors[0]
