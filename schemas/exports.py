"""The snapshot export format (``gapless.export.v4``): what the resolver writes and a
rebuild loads.

An export is a set of chunk objects and one manifest in the exports bucket, all
under ``exports/<tenant>/<catalog>/<epoch>/<export id>/``. The manifest lists every
chunk with its SHA-256, size, record count and kind; the export row in the resolver
database holds the manifest's own SHA-256, so a reader checks every byte it uses.

A record is one aggregate of the accepted state at the export's position W, the
state a replay of the stream through W leaves (each aggregate once; a shipping
policy's versions each once), as the product projections need it. It has no stream
and no position: those are the manifest's (``tenant_id``, ``catalog_id``,
``history_epoch``, ``position``), the same for every record.

A chunk holds records of one kind only (its manifest entry's ``kinds`` names that
one kind), one record a line, in PostgreSQL's ``COPY`` text format: the kind's
fields (``KINDS``) in their order, separated by tabs, ``\\N`` for null, a backslash,
tab, newline or carriage return in a value escaped with a backslash. A field's type
says how its value is spelled, as PostgreSQL's text output of that type spells it:

* ``text`` and ``uuid`` as they are; ``int8`` in decimal;
* ``json``: a JSON document (an object of strings, or an array of strings);
* ``text[]``: an array literal (``{a,"b c"}``), its elements sorted;
* ``timestamptz``: ISO 8601 in UTC (``2026-12-01 00:00:00+00``).

So a chunk is exactly what ``COPY <table> (<columns>) FROM STDIN`` reads into a
table whose columns have those types, and a rebuild's load copies it straight into
its projection table (``processors.projections``, each kind's fields a column of
its table), with no record decoded on the way. ``read_record`` decodes one line for
a reader that is not PostgreSQL. The kinds and fields (``KINDS``):

* ``catalog_item``: ``id`` (the item id), ``revision``, ``class_id``, ``status``
  (whatever it is: a retired or split item is exported too), ``title``,
  ``parent_item_id`` (null for none), ``attributes`` (an object of strings),
  ``decision_id`` (the decision that made this state);
* ``attribute_definition``: ``attribute_key``, ``version``, ``revision``, ``label``,
  ``value_type``, ``allowed_values`` and ``applies_to`` (arrays of strings, the
  latter the class ids, sorted), ``status``, ``decision_id``;
* ``attribute_value``: ``item_id``, ``attribute_key``, ``revision``,
  ``definition_version``, ``value_type`` (its definition's), ``value``,
  ``item_revision``, ``decision_id``;
* ``listing_mapping``: ``id`` (the listing id), ``revision``, ``item_id``,
  ``item_revision``, ``decision_id``;
* ``shipping_policy``: ``id`` (the policy id), ``version`` (its revision), ``scope``,
  ``effective_from``, ``effective_to`` (null for an open end), ``terms`` (an object
  of strings), ``decision_id``;
* ``item_split``: ``id`` (the split id), ``revision`` (always 1),
  ``source_item_id``, ``source_revision``, ``successor_item_ids`` (sorted by code
  point), ``remaps`` (an object: listing id -> successor item id), ``decision_id``.

Catalog classes and decisions are not exported: no product projection keeps them.
Records come kind after kind in the order above, each kind in key order, so an
export of the same state is the same bytes.

Exports of the earlier formats (``gapless.export.v1``: Avro events; ``v2``: one JSON
document a line, which a load had to parse record by record; ``v3``: items without
their ``decision_id``) are not loadable: their manifests are refused as of an unknown
format. An export is kept only
``GAPLESS_EXPORTS_KEEP`` deep and a rebuild asks for a fresh one, so nothing needs
them once the resolver writes v4.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from datetime import datetime
from urllib.parse import quote

from schemas.errors import GaplessError
from schemas.ids import StreamId

FORMAT = "gapless.export.v4"


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a kind of record: its name and type (the module docstring's)."""

    name: str
    type: str


def _fields(*spec: str) -> tuple[Field, ...]:
    return tuple(Field(*s.split()) for s in spec)


KINDS: dict[str, tuple[Field, ...]] = {
    "catalog_item": _fields(
        "id text", "revision int8", "class_id text", "status text", "title text",
        "parent_item_id text", "attributes json", "decision_id uuid",
    ),
    "attribute_definition": _fields(
        "attribute_key text", "version int8", "revision int8", "label text",
        "value_type text", "allowed_values json", "applies_to json", "status text",
        "decision_id uuid",
    ),
    "attribute_value": _fields(
        "item_id text", "attribute_key text", "revision int8", "definition_version int8",
        "value_type text", "value text", "item_revision int8", "decision_id uuid",
    ),
    "listing_mapping": _fields(
        "id text", "revision int8", "item_id text", "item_revision int8", "decision_id uuid",
    ),
    "shipping_policy": _fields(
        "id text", "version int8", "scope text", "effective_from timestamptz",
        "effective_to timestamptz", "terms json", "decision_id uuid",
    ),
    "item_split": _fields(
        "id uuid", "revision int8", "source_item_id text", "source_revision int8",
        "successor_item_ids text[]", "remaps json", "decision_id uuid",
    ),
}  # fmt: skip
"""Each kind of record, in export order, with its fields in line order."""

TYPES = frozenset({"text", "uuid", "int8", "json", "text[]", "timestamptz"})


class ExportCorrupt(GaplessError):
    """A chunk or manifest whose bytes are not what the export recorded."""

    code = "EXPORT_CORRUPT"


def prefix(stream: StreamId, export_id: str) -> str:
    """Where one export's objects live (tenant and catalog percent-quoted)."""
    t, c, e = stream
    return f"exports/{quote(t, safe='')}/{quote(c, safe='')}/{e}/{export_id}/"


def chunk_key(stream: StreamId, export_id: str, number: int) -> str:
    return f"{prefix(stream, export_id)}chunk-{number:06d}.tsv"


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
    """One chunk: its key, SHA-256, size, records, and records of each kind (one kind:
    a chunk holds one; none for an empty chunk)."""

    key: str
    sha256: str
    records: int
    bytes: int
    kinds: dict[str, int] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        """The one kind of record the chunk holds."""
        if len(self.kinds) != 1:
            raise ExportCorrupt(
                f"chunk {self.key} holds records of {sorted(self.kinds)}, not one kind"
            )
        return next(iter(self.kinds))


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
            for chunk in body["chunks"]:
                if chunk.kind not in KINDS:
                    raise ExportCorrupt(f"chunk {chunk.key} holds records of no known kind")
            return cls(**body)
        except (ValueError, TypeError, KeyError) as exc:
            raise ExportCorrupt(f"manifest unreadable: {exc}") from exc


_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_ESCAPED = re.compile(r"\\(.)")
_ELEMENT = re.compile(r'"((?:[^"\\]|\\.)*)"|([^,"{}]+)')


def _unescape(value: str) -> str:
    return _ESCAPED.sub(lambda m: _ESCAPES.get(m[1], m[1]), value)


def _array(literal: str) -> list[str | None]:
    """A one-dimensional ``text[]`` literal's elements."""
    if not (literal.startswith("{") and literal.endswith("}")):
        raise ExportCorrupt(f"not an array literal: {literal!r}")
    out: list[str | None] = []
    for quoted, bare in _ELEMENT.findall(literal[1:-1]):
        if bare:
            out.append(None if bare == "NULL" else bare)
        else:
            out.append(re.sub(r"\\(.)", r"\1", quoted))
    return out


def _decode(type_: str, text: str) -> object:
    if type_ == "int8":
        return int(text)
    if type_ == "json":
        return json.loads(text)
    if type_ == "text[]":
        return _array(text)
    if type_ == "timestamptz":
        return datetime.fromisoformat(text)
    return text


def read_record(kind: str, line: bytes) -> dict[str, object]:
    """One line of a chunk of ``kind`` as its fields' values (null as None); for a
    reader that is not PostgreSQL (a load never decodes a record)."""
    fields = KINDS[kind]
    values = line.rstrip(b"\n").decode().split("\t")
    if len(values) != len(fields):
        raise ExportCorrupt(f"a {kind} record has {len(values)} fields, not {len(fields)}")
    try:
        return {
            f.name: None if v == "\\N" else _decode(f.type, _unescape(v))
            for f, v in zip(fields, values, strict=True)
        }
    except ValueError as exc:
        raise ExportCorrupt(f"a {kind} record PostgreSQL would not read: {exc}") from exc
