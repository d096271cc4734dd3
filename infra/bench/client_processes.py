"""Load offered from processes of their own, not from threads of the bench's.

The resolver API and the writers users run are processes: a figure taken from
threads of one interpreter is set by its lock as much as by the path measured.
``ClientProcesses`` spawns ``count`` interpreters once and hands each one call per
round (a module-level function and its arguments, both picklable); a round's calls
run concurrently, one per process, and ``run`` returns their results in order. A
call that raises is re-raised here with the child's traceback in its message.

The processes are children of the bench's, so a CPU meter rooted at the bench
process counts them (``infra.bench.cpu``). What a call keeps between rounds (a
connection pool, a notifier) it caches in its module and registers with
``at_exit``; those callbacks run in the child when the group closes.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from types import TracebackType
from typing import Any

from schemas.errors import GaplessError

STOP_TIMEOUT_S = 30.0

_closers: list[Callable[[], None]] = []


def at_exit(callback: Callable[[], None]) -> None:
    """Run ``callback`` in this child process when its group closes."""
    _closers.append(callback)


def _serve(conn: Connection) -> None:
    """A child's loop: one call per message until ``None``."""
    try:
        while (message := conn.recv()) is not None:
            function, args = message
            try:
                conn.send(("ok", function(*args)))
            except BaseException:  # reported to the parent, which re-raises it
                conn.send(("error", traceback.format_exc()))
    finally:
        for callback in reversed(_closers):
            with contextlib.suppress(Exception):  # on the way out: no one to report to
                callback()


class ClientProcessError(GaplessError):
    """A call raised in a client process; the message holds its traceback."""

    code = "BENCH_CLIENT_FAILED"


class ClientProcesses:
    """``count`` spawned processes, each serving one call per round."""

    def __init__(self, count: int) -> None:
        context = multiprocessing.get_context("spawn")
        self._conns: list[Connection] = []
        self._processes: list[Any] = []
        for n in range(count):
            parent, child = context.Pipe()
            process = context.Process(
                target=_serve, args=(child,), name=f"bench-client-{n}", daemon=True
            )
            process.start()
            child.close()
            self._conns.append(parent)
            self._processes.append(process)

    @property
    def pids(self) -> list[int]:
        return [int(p.pid) for p in self._processes]

    def run(self, calls: Sequence[tuple[Callable[..., Any], tuple[Any, ...]]]) -> list[Any]:
        """One call per process (at most as many calls as processes), concurrently."""
        if len(calls) > len(self._conns):
            raise ValueError(f"{len(calls)} calls for {len(self._conns)} processes")
        for conn, call in zip(self._conns, calls, strict=False):
            conn.send(call)
        replies = [conn.recv() for conn in self._conns[: len(calls)]]
        failed = [text for kind, text in replies if kind == "error"]
        if failed:
            raise ClientProcessError(f"a client process failed:\n{failed[0]}")
        return [value for _kind, value in replies]

    def close(self) -> None:
        for conn in self._conns:
            with contextlib.suppress(OSError):  # that child is gone already
                conn.send(None)
        for process in self._processes:
            process.join(STOP_TIMEOUT_S)
            if process.is_alive():
                process.kill()
                process.join()
        for conn in self._conns:
            conn.close()

    def __enter__(self) -> ClientProcesses:
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _exc: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        self.close()
