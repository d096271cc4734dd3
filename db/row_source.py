"""Rows handed to a statement column by column, as the ``FROM`` item that yields them:
``unnest`` of one array per column for many rows, ``VALUES`` of scalars for a few.

A write of many rows sends one array per column (binary), so its statement is the
same whatever the count. For the one or two rows of a one-item decision (thirteen
arrays in its write) the arrays cost more than the rows: psycopg's array dumpers run
in Python, and the server builds and deconstructs each array and runs a function
scan over them. So up to ``FEW_ROWS`` rows go as scalar ``VALUES``, each cell cast to
the column's type (with the write's keys shared, ``db.joined_write.SHARED``: 3 % less
client and 5 % less PostgreSQL CPU a one-item decision, in alternation).
The statement's text then depends on the count (one form per count up to
``FEW_ROWS``, then the array form), which bounds the prepared statements a connection
keeps for each write.

Both forms yield the same columns under the same names, in the order given, and with
``ordinality`` a last column ``ord`` numbering the rows from 1, as ``WITH
ORDINALITY`` does.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

FEW_ROWS = 2
"""Up to this many rows go as ``VALUES``: the rows of a one-item decision (its item,
its two effects, its two events)."""


class Column(NamedTuple):
    """One column: the parameter holding its values (a list, one per row), its name in
    the ``FROM`` item, its SQL type, and whether psycopg sends it in binary. A tuple:
    each write looks its form up by its columns, and a tuple hashes without Python
    code."""

    param: str
    name: str
    sql_type: str
    binary: bool = True

    def placeholder(self, param: str, array: bool) -> str:
        fmt = "b" if self.binary else "s"
        return f"%({param}){fmt}::{self.sql_type}{'[]' if array else ''}"


def rows_from(
    columns: Sequence[Column],
    params: Mapping[str, Any],
    alias: str,
    ordinality: bool = False,
) -> tuple[str, dict[str, Any]]:
    """The ``FROM`` item (``… AS alias(columns)``) yielding the rows whose columns are
    the lists ``params[column.param]`` (all of one length), and the parameters for it:
    ``params`` as they are for the array form, or with each column's list replaced by
    one parameter per cell (``<param>_<row>``) for ``VALUES``."""
    count = len(params[columns[0].param])
    form = _form(tuple(columns), alias, ordinality, count if 0 < count <= FEW_ROWS else 0)
    if not form.cells:
        return form.text, dict(params)
    out = {k: v for k, v in params.items() if k not in form.lists}
    for name, param, row in form.cells:
        out[name] = params[param][row]
    return form.text, out


@dataclass(frozen=True, slots=True)
class _Form:
    """A ``FROM`` item's text, and for ``VALUES`` each cell's parameter as ``(name,
    column's list, row)`` and the lists they replace."""

    text: str
    cells: tuple[tuple[str, str, int], ...]
    lists: frozenset[str]


@functools.lru_cache(maxsize=256)
def _form(columns: tuple[Column, ...], alias: str, ordinality: bool, count: int) -> _Form:
    """``rows_from``'s text for ``count`` rows as ``VALUES`` (0: the array form): the
    same few writes are made again and again, so each form is built once."""
    names = ", ".join([*(c.name for c in columns), *(["ord"] if ordinality else [])])
    if count == 0:
        arrays = ", ".join(c.placeholder(c.param, array=True) for c in columns)
        numbered = " WITH ORDINALITY" if ordinality else ""
        return _Form(f"unnest({arrays}){numbered} AS {alias}({names})", (), frozenset())
    rows, cells = [], []
    for row in range(count):
        placeholders = []
        for c in columns:
            cells.append((f"{c.param}_{row}", c.param, row))
            placeholders.append(c.placeholder(f"{c.param}_{row}", array=False))
        if ordinality:
            placeholders.append(f"{row + 1}::bigint")
        rows.append(f"({', '.join(placeholders)})")
    text = f"(VALUES {', '.join(rows)}) AS {alias}({names})"
    return _Form(text, tuple(cells), frozenset(c.param for c in columns))
