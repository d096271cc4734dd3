"""An export's spool: its records in a local file, so the snapshot they are read in
can close before any of them goes to the object store.

The writer (``producers.exports.export``) streams ``COPY`` blocks into the spool
inside the snapshot; the spool cuts them into chunks of whole lines of one kind of
record as they come (at ``limit`` lines, and where the kind changes), keeping only
each chunk's place in the file, line count, kind and SHA-256 in memory. Once the
snapshot is closed, ``read`` hands each chunk back (checked against the SHA-256
taken on the way in) to be put in the bucket. The file lives in
``GAPLESS_EXPORT_SPOOL_DIR``, named after its export, and needs room for the largest
export.

While a spool is open its writer holds an exclusive lock on the file (``flock``);
the kernel drops it when the process dies. A process that crashed mid-export leaves
its spool behind: ``clear_left_behind`` (run when the resolver API starts) deletes
every spool no live writer holds, and a spool of the same export opened again is
overwritten. Nothing reads a spool but its own writer, so a deleted one costs only
the export it belonged to, which is left ``writing`` and retried (the rebuild asks
for a new one once its heartbeat stops).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from db.resolver.exports import Block
from producers.exports.exceptions import ExportError, ExportSpoolFailed

log = logging.getLogger(__name__)

_PREFIX, _SUFFIX = "gapless-export-", ".spool"


@dataclass(frozen=True, slots=True)
class SpooledChunk:
    offset: int
    length: int
    lines: int
    kinds: dict[str, int]
    sha256: str


_WRITE_EVERY = 1024
"""Rows held before they are written, hashed and counted together (one Python call
each per row was about a third of an export's time)."""


@dataclass
class ExportSpool:
    """One export's spool file, open for writing and then reading (a context
    manager: the file is closed and deleted on the way out, whatever happened)."""

    path: Path
    limit: int
    file: IO[bytes]
    chunks: list[SpooledChunk] = field(default_factory=list)
    _start: int = 0
    _length: int = 0
    _lines: int = 0
    _newlines: int = 0
    _last: bytes = b""
    _kind: str | None = None
    _held: list[bytes] = field(default_factory=list)
    _hash: hashlib._Hash = field(default_factory=hashlib.sha256)

    @classmethod
    def open(cls, directory: str, export_id: uuid.UUID, limit: int) -> ExportSpool:
        path = Path(directory) / f"{_PREFIX}{export_id}{_SUFFIX}"
        try:
            file = path.open("w+b")  # a spool of the same export left behind is overwritten
        except OSError as exc:
            raise ExportSpoolFailed(f"{path}: {exc}") from exc
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            file.close()
            raise ExportSpoolFailed(f"{path}: another writer holds it") from exc
        return cls(path, limit, file)

    def __enter__(self) -> ExportSpool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.file.close()
        self.path.unlink(missing_ok=True)

    @property
    def records(self) -> int:
        """Lines spooled so far, in cut chunks and the one being filled."""
        return sum(c.lines for c in self.chunks) + self._lines + len(self._held)

    def add(self, kind: str, block: Block) -> bool:
        """Spool one ``COPY`` block (one row, one line) of ``kind``; True when it closed
        a chunk."""
        closed = self._kind is not None and kind != self._kind
        if closed:
            self.cut()  # a chunk holds one kind of record
        self._kind = kind
        self._held.append(bytes(block))
        if self._lines + len(self._held) >= self.limit:
            self.cut()
            return True
        if len(self._held) >= _WRITE_EVERY:
            self._write()
        return closed

    def _write(self) -> None:
        """The rows held, to the file, the chunk's hash and its counts."""
        if not self._held:
            return
        data = b"".join(self._held)
        try:
            self.file.write(data)
        except OSError as exc:
            raise ExportSpoolFailed(f"{self.path}: {exc}") from exc
        self._hash.update(data)
        self._length += len(data)
        self._newlines += data.count(b"\n")
        self._last = data[-1:]
        self._lines += len(self._held)
        self._held = []

    def cut(self) -> None:
        """Close the chunk being filled (nothing when it is empty)."""
        self._write()
        if not self._lines:
            return
        if self._newlines != self._lines or self._last != b"\n":
            # COPY sends one row a block; anything else would cut a record in two
            raise ExportError(f"{self.path.name}: COPY sent a block of other than one row")
        assert self._kind is not None
        self.chunks.append(
            SpooledChunk(
                self._start, self._length, self._lines, {self._kind: self._lines},
                self._hash.hexdigest(),
            )
        )  # fmt: skip
        self._start += self._length
        self._length = self._lines = self._newlines = 0
        self._last = b""
        self._kind, self._hash = None, hashlib.sha256()

    def read(self, chunk: SpooledChunk) -> bytes:
        """A cut chunk's bytes back from the file, checked against its SHA-256."""
        try:
            self.file.flush()
            data = os.pread(self.file.fileno(), chunk.length, chunk.offset)
        except OSError as exc:
            raise ExportSpoolFailed(f"{self.path}: {exc}") from exc
        if len(data) != chunk.length or hashlib.sha256(data).hexdigest() != chunk.sha256:
            raise ExportSpoolFailed(f"{self.path}: a chunk read back is not what was spooled")
        return data


def clear_left_behind(directory: str) -> int:
    """Delete the spools of ``directory`` no live writer holds (left by a process that
    died mid-export); returns how many went."""
    cleared = 0
    for path in Path(directory).glob(f"{_PREFIX}*{_SUFFIX}"):
        with contextlib.suppress(FileNotFoundError), path.open("rb") as file:
            try:
                fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live writer's
            path.unlink(missing_ok=True)
            cleared += 1
    if cleared:
        log.info("deleted %d export spool(s) left behind in %s", cleared, directory)
    return cleared
