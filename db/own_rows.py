"""Rows a transaction wrote itself, kept so it need not read them back; and rows it
found absent while holding their stream's cursor lock.

Until the transaction ends, no other transaction sees a row it inserted, and none
can change a row it updated (the update holds the row's lock): what it wrote is
exactly what it would read, locked or not. A row of a catalog found absent under
the catalog's cursor lock stays absent until COMMIT, since every writer of the
catalog takes that lock first; and should one appear after all, the plain INSERT
that relies on its absence is refused by the primary key, rolling everything back.

A repository that writes rows records them here (``put``), one that reads them
under the cursor lock records those it did not find (``ABSENT``); one that reads
rows answers those it finds here without a statement (``get``); one that changes
them without knowing the result forgets them (``forget``), so a later read goes to
the database. A read whose rows are all found here is no round trip at all, which
is what lets a Unit of Work doing several decisions in one transaction (the capture
worker's batch) send its writes without waiting.

Each Unit of Work keeps one per transaction (``db.unit_of_work``); it is dropped
with the transaction, committed or rolled back.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

Key = tuple[str, ...]

ABSENT: Any = object()
"""``get``'s answer for a row found absent under its stream's cursor lock."""


class OwnRows:
    """The rows one transaction wrote or found absent, by table and primary key."""

    def __init__(self) -> None:
        self._rows: dict[str, dict[Key, Any]] = {}

    def put(self, table: str, key: Key, row: Any) -> None:
        """Record a row as this transaction wrote it (or ``ABSENT``)."""
        self._rows.setdefault(table, {})[key] = row

    def get(self, table: str, key: Key) -> Any | None:
        """The row this transaction wrote under ``key``, ``ABSENT``, or None: not
        known here (it may exist; ask the database)."""
        return self._rows.get(table, {}).get(key)

    def forget(self, table: str, keys: Iterable[Key]) -> None:
        """Changed by a statement whose outcome is not recorded: read it again."""
        rows = self._rows.get(table)
        if rows:
            for key in keys:
                rows.pop(key, None)

    def clear(self) -> None:
        self._rows.clear()
