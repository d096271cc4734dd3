"""One statement for a whole write: the statements of a transaction joined as the
data-modifying parts (``WITH … AS (…)``) of a single statement, with its checks.

A Unit of Work that read without the cursor lock (``UnitOfWork.unlocked_first``)
writes everything at once: each deferred INSERT becomes a part of its own, the
stream writer adds the cursor's compare-and-set and the outbox rows, and the final
``SELECT`` evaluates the checks in order (the cursor's first), each raising when its
count is not the one expected. One statement is one transaction in autocommit: a
failed check or any error leaves nothing written.

PostgreSQL runs a data-modifying part once, to completion; a part the ``SELECT``
reads (a check's count) runs when that check is evaluated, the others after the
``SELECT``. So the cursor's compare-and-set, the first check, takes the stream's row
lock before any other part writes a row: a concurrent writer of the stream waits
there and then finds the cursor moved, without holding anything the first needs.

Parts share one snapshot and do not see each other's rows, so only plain INSERTs
(``joinable``) are joined; a read issued after a deferred write to the same table
needs the write's rows and makes the unit redo its work under the lock
(``refuse_unlocked_read``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any

PLACEHOLDER = re.compile(r"%(?:\((\w+)\))?([sbt])|%%")
"""psycopg's placeholders: ``%s``/``%b``/``%t``, their named forms and ``%%``."""

CHANGED = "GL409"
"""The SQLSTATE ``write_expected`` raises: a count the write depended on differed."""

_LOCKING = re.compile(r"\bFOR\s+(?:NO\s+KEY\s+UPDATE|KEY\s+SHARE|UPDATE|SHARE)\b|advisory", re.I)
_WRITES = re.compile(r"^\s*(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+(\w+)", re.I)


SHARED = ("t", "c", "e", "d")
"""Parameter names the parts of a write give alike to the same keys (the tenant, the
catalog, the history epoch, the decision): where a part's value under such a name is
the one the write already has, the part uses that parameter instead of one of its
own. Fewer parameters are less to dump and send, and they keep a one-item decision's
write within what psycopg caches the conversion of (``psycopg._queries``: at most 50
parameters and 4,096 bytes; beyond, the statement is parsed again at every call)."""


class LockNeeded(Exception):
    """The unit's work cannot go on without the stream's cursor lock: it is redone,
    from the start, under the lock (``UnitOfWork.unlocked_first``)."""


def joinable(query: str) -> bool:
    """Whether ``query`` can be a part of a joined write: a plain INSERT (no WITH of
    its own, which a part may not have when it modifies data)."""
    return query.lstrip()[:6].upper() == "INSERT"


@functools.lru_cache(maxsize=1024)
def written_table(query: str) -> str | None:
    """The table an INSERT, UPDATE or DELETE writes, or None."""
    found = _WRITES.match(query)
    return found.group(1).lower() if found else None


def refuse_unlocked_read(query: str, deferred: Sequence[tuple[str, object]]) -> None:
    """Raise ``LockNeeded`` unless ``query`` may run without the cursor lock: a plain
    ``SELECT`` that takes no lock (an unlocked read's lock would end with its own
    statement) and reads no table a deferred statement of this unit writes (the read
    would not see those rows)."""
    if not _plain_read(query):
        raise LockNeeded(f"not a plain read: {query[:60]!r}")
    for written, _ in deferred:
        table = written_table(written)
        if table is not None and _mentions(query, table):
            raise LockNeeded(f"reads {table}, which this unit has written")


@functools.lru_cache(maxsize=1024)
def _plain_read(query: str) -> bool:
    return query.lstrip()[:6].upper() == "SELECT" and not _LOCKING.search(query)


@functools.lru_cache(maxsize=4096)
def _mentions(query: str, table: str) -> bool:
    return re.search(rf"\b{table}\b", query, re.I) is not None


_ABSENT = object()


def rename(
    query: str,
    params: Sequence[Any] | Mapping[str, Any] | None,
    prefix: str,
    keep: frozenset[str] = frozenset(),
) -> tuple[str, dict[str, Any]]:
    """``query`` with every placeholder named ``prefix_…`` but those in ``keep`` and its
    parameters by those names (a positional parameter by its index), so that
    statements can be joined."""
    if isinstance(params, Mapping):
        renamed, names = _renamed(query, prefix, True, tuple(sorted(keep)))
        return renamed, {new: params[old] for new, old in names}
    values = list(params or ())
    renamed, names = _renamed(query, prefix, False, tuple(sorted(keep)))
    return renamed, {new: values[int(old)] for new, old in names}


@functools.lru_cache(maxsize=512)
def _renamed(
    query: str, prefix: str, named: bool, keep: tuple[str, ...]
) -> tuple[str, tuple[tuple[str, str], ...]]:
    """``rename``'s query and its (new name, old name or index) pairs, in order, each
    name once: the same few statements are joined again and again."""
    names: dict[str, str] = {}

    def placeholder(found: re.Match[str]) -> str:
        if found.group(0) == "%%":
            return "%%"
        old, fmt = found.group(1), found.group(2)
        if old is None:
            if named:
                raise ValueError(f"a positional placeholder among named ones: {query[:60]!r}")
            old = str(len(names))
        new = old if old in keep else f"{prefix}_{old}"
        names.setdefault(new, old)
        return f"%({new}){fmt}"

    return PLACEHOLDER.sub(placeholder, query), tuple(names.items())


@functools.lru_cache(maxsize=512)
def _part(query: str, name: str, keep: tuple[str, ...]) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A named part's text (``name AS (…)``) and the pairs of its own parameters (those
    not kept under their shared names), built once per query, name and sharing."""
    renamed, names = _renamed(query, name, True, keep)
    return f"{name} AS ({renamed})", tuple((new, old) for new, old in names if new != old)


class JoinedWrite:
    """The parts and checks of one statement, in the order they were added.

    A decision's write is built for every decision, from the same few statements: a
    part's text and the names of its parameters are built once (``_part``), and what
    remains per write is comparing the shared keys and copying the values."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._checks: list[str] = []
        self._params: dict[str, Any] = {}

    def part(self, query: str, params: Sequence[Any] | Mapping[str, Any] | None) -> str:
        """Add ``query`` as a part; returns its name, for a check to count its rows."""
        name = f"w{len(self._parts)}"
        if type(params) is not dict and not isinstance(params, Mapping):
            renamed, named = rename(query, params, name)
            self._parts.append(f"{name} AS ({renamed})")
            self._params |= named
            return name
        have = self._params
        keep = self._shareable(params)
        text, own = _part(query, name, keep)
        self._parts.append(text)
        for key in keep:
            have.setdefault(key, params[key])
        for new, old in own:
            have[new] = params[old]
        return name

    def _shareable(self, params: Mapping[str, Any]) -> tuple[str, ...]:
        """The ``SHARED`` names of ``params`` whose value this write has under that name
        already (or has not yet), in ``SHARED``'s order: those the part uses as they are."""
        have = self._params
        keep: list[str] = []
        for key in SHARED:
            value = params.get(key, _ABSENT)
            if value is _ABSENT:
                continue
            held = have.get(key, _ABSENT)
            if held is _ABSENT or held is value or (type(held) is type(value) and held == value):
                keep.append(key)
        return tuple(keep)

    def check(self, expression: str, params: Mapping[str, Any] | None = None) -> None:
        """Add ``expression`` (which may count a part's rows) to the final SELECT."""
        prefix = f"c{len(self._checks)}"
        renamed, names = _renamed(expression, prefix, True, ())
        self._checks.append(renamed)
        given, have = params or {}, self._params
        for new, old in names:
            have[new] = given[old]

    def expect(self, part: str, rows: int, what: str) -> None:
        """Check that ``part`` returned exactly ``rows`` rows (``write_expected``)."""
        self.check(
            f"write_expected(%(what)s, (SELECT count(*) FROM {part}), %(rows)s)",
            {"what": what, "rows": rows},
        )

    def statement(self) -> tuple[str, dict[str, Any]]:
        """The joined statement and its parameters (the write's own: it is done)."""
        head = f"WITH {', '.join(self._parts)} " if self._parts else ""
        return f"{head}SELECT {', '.join(self._checks) or 'true'}", self._params
