"""Memory of the bench's deployed processes, read from ``/proc``: ``VmRSS`` now and
``VmHWM``, the peak resident set since the process started or since the peak was
last reset (writing ``5`` to ``/proc/<pid>/clear_refs``, allowed for one's own
processes), summed over the process and its descendants.
"""

from __future__ import annotations

import os
from pathlib import Path


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            text = Path(f"/proc/{pid}/task/{task}/children").read_text()
        except OSError:
            continue
        found.extend(int(c) for c in text.split())
    return found


def process_tree(pid: int) -> list[int]:
    """``pid`` and every descendant alive now."""
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(_children(current))
    return tree


def _status_kb(pid: int, field_name: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field_name}:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def rss_mb(pid: int) -> float:
    """Resident memory of the process tree now, MB."""
    return sum(_status_kb(p, "VmRSS") for p in process_tree(pid)) / 1024


def peak_rss_mb(pid: int) -> float:
    """Peak resident memory of the process tree (each process's ``VmHWM``), MB."""
    return sum(_status_kb(p, "VmHWM") for p in process_tree(pid)) / 1024


def reset_peak(pid: int) -> bool:
    """Start each process's ``VmHWM`` again from its current RSS; False if refused."""
    ok = True
    for p in process_tree(pid):
        try:
            Path(f"/proc/{p}/clear_refs").write_text("5")
        except OSError:
            ok = False
    return ok
