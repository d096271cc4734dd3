"""The snapshot export format (``gapless.export.v2``): what the resolver writes and a
rebuild loads.

An export is a set of chunk objects and one manifest in the exports bucket, all
under ``exports/<tenant>/<catalog>/<epoch>/<export id>/``. The manifest lists every
chunk with its SHA-256, size, record count and record count per kind; the export
row in the resolver database holds the manifest's own SHA-256, so a reader checks
every byte it uses.

A chunk is text: one record a line, each line one JSON object as PostgreSQL's
``COPY … TO STDOUT`` writes a one-column row in text format (so a backslash in the
JSON appears doubled, and the JSON holds no raw newline): exactly what
``COPY … FROM STDIN`` reads back into a ``jsonb`` column, byte for byte. A record is
one aggregate of the accepted state at the export's position W, the state a replay
of the stream through W leaves (each aggregate once; a shipping policy's versions
each once), as the product projections need it. It has no stream and no position:
those are the manifest's (``tenant_id``, ``catalog_id``, ``history_epoch``,
``position``), the same for every record. Its ``kind`` names its aggregate type;
its fields (``KINDS``):

* ``catalog_item``: ``id`` (the item id), ``revision``, ``class_id``, ``status``
  (whatever it is: a retired or split item is exported too), ``title``,
  ``parent_item_id`` (null for none), ``attributes`` (an object of strings);
* ``attribute_definition``: ``attribute_key``, ``version``, ``revision``, ``label``,
  ``value_type``, ``allowed_values`` and ``applies_to`` (arrays of strings, the
  latter the class ids, sorted), ``status``, ``decision_id``;
* ``attribute_value``: ``item_id``, ``attribute_key``, ``revision``,
  ``definition_version``, ``value_type`` (its definition's), ``value`` (text),
  ``item_revision``, ``decision_id``;
* ``listing_mapping``: ``id`` (the listing id), ``revision``, ``item_id``,
  ``item_revision``, ``decision_id``;
* ``shipping_policy``: ``id`` (the policy id), ``version`` (its revision), ``scope``,
  ``effective_from``, ``effective_to`` (ISO 8601 timestamps, the latter null for an
  open end), ``terms`` (an object of strings), ``decision_id``;
* ``item_split``: ``id`` (the split id), ``revision`` (always 1),
  ``source_item_id``, ``source_revision``, ``successor_item_ids`` (an array, sorted),
  ``remaps`` (an object: listing id -> successor item id), ``decision_id``.

Ids, uuids and texts are JSON strings; revisions, versions and positions numbers.
Catalog classes and decisions are not exported: no product projection keeps them.
Records come kind after kind in the order above, each kind in key order, so an
export of the same state is the same bytes.

Exports of the earlier format (``gapless.export.v1``: Avro events) are not
loadable: their manifests are refused as of an unknown format. An export is kept
only ``GAPLESS_EXPORTS_KEEP`` deep and a rebuild asks for a fresh one, so nothing
needs them once the resolver writes v2.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from urllib.parse import quote

from schemas.errors import GaplessError
from schemas.ids import StreamId

FORMAT = "gapless.export.v2"

KINDS: dict[str, tuple[str, ...]] = {
    "catalog_item": (
        "id", "revision", "class_id", "status", "title", "parent_item_id", "attributes",
    ),
    "attribute_definition": (
        "attribute_key", "version", "revision", "label", "value_type", "allowed_values",
        "applies_to", "status", "decision_id",
    ),
    "attribute_value": (
        "item_id", "attribute_key", "revision", "definition_version", "value_type", "value",
        "item_revision", "decision_id",
    ),
    "listing_mapping": ("id", "revision", "item_id", "item_revision", "decision_id"),
    "shipping_policy": (
        "id", "version", "scope", "effective_from", "effective_to", "terms", "decision_id",
    ),
    "item_split": (
        "id", "revision", "source_item_id", "source_revision", "successor_item_ids", "remaps",
        "decision_id",
    ),
}  # fmt: skip
"""Each kind of record, in export order, with its fields besides ``kind``."""


class ExportCorrupt(GaplessError):
    """A chunk or manifest whose bytes are not what the export recorded."""

    code = "EXPORT_CORRUPT"


def prefix(stream: StreamId, export_id: str) -> str:
    """Where one export's objects live (tenant and catalog percent-quoted)."""
    t, c, e = stream
    return f"exports/{quote(t, safe='')}/{quote(c, safe='')}/{e}/{export_id}/"


def chunk_key(stream: StreamId, export_id: str, number: int) -> str:
    return f"{prefix(stream, export_id)}chunk-{number:06d}.jsonl"


def manifest_key(stream: StreamId, export_id: str) -> str:
    return f"{prefix(stream, export_id)}manifest.json"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_chunk(data: bytes, expected_sha256: str, records: int) -> bytes:
    """The chunk's bytes, after checking its SHA-256 and that it is ``records`` whole
    lines."""
    if sha256(data) != expected_sha256:
        raise ExportCorrupt(f"chunk checksum mismatch (expected {expected_sha256})")
    if data and not data.endswith(b"\n"):
        raise ExportCorrupt("chunk does not end at a line boundary")
    lines = data.count(b"\n")
    if lines != records:
        raise ExportCorrupt(f"chunk has {lines} records, its manifest says {records}")
    return data


@dataclass(frozen=True, slots=True)
class ChunkEntry:
    """One chunk: its key, SHA-256, size, records, and records of each kind."""

    key: str
    sha256: str
    records: int
    bytes: int
    kinds: dict[str, int] = field(default_factory=dict)


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
    """Records of each kind in the whole export."""
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
                raise ExportCorrupt(
                    f"unknown export format {body.get('format')!r} (only {FORMAT!r} loads)"
                )
            body["chunks"] = tuple(ChunkEntry(**c) for c in body["chunks"])
            return cls(**body)
        except (ValueError, TypeError, KeyError) as exc:
            raise ExportCorrupt(f"manifest unreadable: {exc}") from exc
