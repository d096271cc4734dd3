"""CPU time of the processes on the deployed path, read from ``/proc``: each process
tree's user and system time, its exited children's included (a PostgreSQL backend
that ends between two samples is counted in the postmaster's ``cutime``).

The bench process itself stands for the writers (its other threads are idle while
they write; the relay and the agents it starts count as themselves, not inside it:
``exclusive_trees``); the local PostgreSQL, Kafka and S3 server are found by their pid files when
the bench runs on the services ``gapless up`` started, and left out otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import psycopg

from infra.bench.memory import process_tree
from infra.local.layout import current_layout

TICKS = os.sysconf("SC_CLK_TCK")
LOCAL_SERVICES = ("postgres", "kafka", "s3")


def _own_seconds(pid: int, with_exited_children: bool) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0  # gone meanwhile
    # After the ")": state is field 3 of stat(5), so utime (14) is index 11 here.
    ticks = int(fields[11]) + int(fields[12])
    if with_exited_children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / TICKS


def process_seconds(pid: int) -> float | None:
    """One process's own user and system time, or None when this machine cannot
    read it (gone, or not a process of this machine)."""
    if not Path(f"/proc/{pid}/stat").exists():
        return None
    return _own_seconds(pid, with_exited_children=False)


def local_service_pids() -> dict[str, int]:
    """The pids of the local PostgreSQL and Kafka, where their pid files name live ones."""
    layout = current_layout()
    found: dict[str, int] = {}
    for name in LOCAL_SERVICES:
        try:
            pid = int(layout.pid_file(name).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        if Path(f"/proc/{pid}").exists():
            found[name] = pid
    return found


def exclusive_trees(
    roots: Mapping[str, int], trees: Mapping[str, Sequence[int]]
) -> dict[str, list[int]]:
    """Each named process's tree without the trees of the other named processes that
    run inside it: the bench process starts the relay and the agents, whose CPU is
    theirs, not the writers'."""
    out: dict[str, list[int]] = {}
    for name, tree in trees.items():
        members = set(tree)
        nested: set[int] = set()
        for other, root in roots.items():
            if other != name and root != roots[name] and root in members:
                nested.update(trees[other])
        out[name] = [pid for pid in tree if pid not in nested]
    return out


class CpuMeter:
    """CPU seconds of named processes between two ``sample`` calls, each counted once:
    a named process inside another's tree counts for itself only."""

    def __init__(self, pids: Mapping[str, int]) -> None:
        self.pids = dict(pids)

    def sample(self) -> dict[str, float]:
        trees = {name: process_tree(pid) for name, pid in self.pids.items()}
        return {
            name: sum(_own_seconds(p, with_exited_children=p == self.pids[name]) for p in tree)
            for name, tree in exclusive_trees(self.pids, trees).items()
        }

    @staticmethod
    def per_event_us(
        before: Mapping[str, float], after: Mapping[str, float], events: int
    ) -> dict[str, float]:
        """Microseconds of CPU per event for each process between the two samples."""
        if events <= 0:
            return {}
        return {name: (after[name] - before[name]) / events * 1e6 for name in before}


class DatabaseCpu:
    """CPU seconds of the PostgreSQL backends connected to each of ``databases`` (a
    name for each database name) between two ``sample`` calls: which side of the
    pipeline PostgreSQL's time went to. Only backends alive at both samples count (the
    pools' connections are; a backend that ends between them is the postmaster's
    ``cutime`` and stays in the whole's figure only), so the parts add up to at most
    the whole. ``dsn`` reads ``pg_stat_activity``; the backends must be this
    machine's processes."""

    def __init__(self, dsn: str, databases: Mapping[str, str]) -> None:
        self._dsn = dsn
        self._names = {datname: name for name, datname in databases.items()}

    def sample(self) -> dict[int, tuple[str, float]]:
        """Each named database's backends: pid -> (name, CPU seconds so far)."""
        with psycopg.connect(self._dsn, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pid, datname FROM pg_stat_activity"
                " WHERE backend_type = 'client backend' AND datname = ANY(%s)",
                (list(self._names),),
            ).fetchall()
        return {pid: (self._names[datname], _own_seconds(pid, False)) for pid, datname in rows}

    @staticmethod
    def per_event_us(
        before: Mapping[int, tuple[str, float]],
        after: Mapping[int, tuple[str, float]],
        events: int,
    ) -> dict[str, float]:
        """Microseconds of CPU per event for each named database between the samples."""
        out: dict[str, float] = {}
        for pid, (name, seconds) in after.items():
            if pid in before and events > 0:
                out[name] = out.get(name, 0.0) + (seconds - before[pid][1]) / events * 1e6
        return out
