"""The snapshot export format: what the resolver writes and a rebuild loads.

An export is a set of chunk objects and one manifest in the exports bucket, all
under ``exports/<tenant>/<catalog>/<epoch>/<export id>/``. A chunk holds events,
one per aggregate revision of the accepted state at the export's position W, each
encoded exactly as on the events topic (``schemas.codec``), framed as a 4-byte
big-endian length and the bytes, after a 4-byte magic. The manifest lists every
chunk with its SHA-256, record count and size; the export row in the resolver
database holds the manifest's own SHA-256, so a reader checks every byte it uses.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from urllib.parse import quote

from schemas.errors import GaplessError
from schemas.ids import StreamId

FORMAT = "gapless.export.v1"
_MAGIC = b"GLX1"
_LENGTH = struct.Struct(">I")


class ExportCorrupt(GaplessError):
    """A chunk or manifest whose bytes are not what the export recorded."""

    code = "EXPORT_CORRUPT"


def prefix(stream: StreamId, export_id: str) -> str:
    """Where one export's objects live (tenant and catalog percent-quoted)."""
    t, c, e = stream
    return f"exports/{quote(t, safe='')}/{quote(c, safe='')}/{e}/{export_id}/"


def chunk_key(stream: StreamId, export_id: str, number: int) -> str:
    return f"{prefix(stream, export_id)}chunk-{number:06d}.bin"


def manifest_key(stream: StreamId, export_id: str) -> str:
    return f"{prefix(stream, export_id)}manifest.json"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def frame(records: Iterable[bytes]) -> bytes:
    """One chunk's bytes: the magic, then each record as length + bytes."""
    parts = [_MAGIC]
    for record in records:
        parts.append(_LENGTH.pack(len(record)))
        parts.append(record)
    return b"".join(parts)


def unframe(data: bytes, expected_sha256: str) -> Iterator[bytes]:
    """The records of a chunk, after checking its SHA-256 and its framing."""
    if sha256(data) != expected_sha256:
        raise ExportCorrupt(f"chunk checksum mismatch (expected {expected_sha256})")
    if not data.startswith(_MAGIC):
        raise ExportCorrupt("chunk does not start with the export magic")
    view = memoryview(data)
    at = len(_MAGIC)
    while at < len(data):
        if at + _LENGTH.size > len(data):
            raise ExportCorrupt(f"chunk truncated in a record length at byte {at}")
        (length,) = _LENGTH.unpack_from(view, at)
        at += _LENGTH.size
        if at + length > len(data):
            raise ExportCorrupt(f"chunk truncated in a record at byte {at}")
        yield bytes(view[at : at + length])
        at += length


@dataclass(frozen=True, slots=True)
class ChunkEntry:
    key: str
    sha256: str
    records: int
    bytes: int


@dataclass(frozen=True, slots=True)
class Manifest:
    """What an export holds; ``position`` is W, the committed cursor its snapshot read."""

    export_id: str
    tenant_id: str
    catalog_id: str
    history_epoch: int
    position: int
    lease_id: str
    created_at: str
    chunks: tuple[ChunkEntry, ...]
    records: int
    by_aggregate: dict[str, int]
    format: str = FORMAT

    @property
    def stream(self) -> StreamId:
        return StreamId(self.tenant_id, self.catalog_id, self.history_epoch)

    def to_bytes(self) -> bytes:
        body = asdict(self)
        body["chunks"] = [asdict(c) for c in self.chunks]
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes, expected_sha256: str) -> Manifest:
        if sha256(data) != expected_sha256:
            raise ExportCorrupt(f"manifest checksum mismatch (expected {expected_sha256})")
        try:
            body = json.loads(data)
            if body.get("format") != FORMAT:
                raise ExportCorrupt(f"unknown export format {body.get('format')!r}")
            body["chunks"] = tuple(ChunkEntry(**c) for c in body["chunks"])
            return cls(**body)
        except (ValueError, TypeError, KeyError) as exc:
            raise ExportCorrupt(f"manifest unreadable: {exc}") from exc
