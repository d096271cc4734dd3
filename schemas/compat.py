"""Schema evolution guard: can the current schema read what a released schema wrote?

``check_backward`` applies the Avro schema-resolution rules statically and lists
every place where a reader using the new schema would fail (or silently misread)
data written with the old one. The codec accepts messages from every release, so
the current schemas must stay readable against all of them, not only the latest
(``released_pairs`` lists every release).

One rule is stricter than the Avro specification: changing a logical type (say
``timestamp-micros`` to ``timestamp-millis``) is reported, because the bytes would
still resolve but decode to a different value.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from fastavro import parse_schema

from schemas.codec import AVRO_DIR, AvroSchema, load_named_schema, release_dirs

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
NAMED_KINDS = frozenset({"record", "error", "enum", "fixed"})

PROMOTIONS: dict[str, frozenset[str]] = {
    "int": frozenset({"long", "float", "double"}),
    "long": frozenset({"float", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}
"""Writer type -> reader types it may be promoted to, per the Avro specification."""

_LOGICAL_PARAMETERS = ("precision", "scale")


def check_backward(writer_old: AvroSchema, reader_new: AvroSchema) -> list[str]:
    """Problems a reader with ``reader_new`` would have reading data written with ``writer_old``.

    An empty list means compatible. Each problem names the path of the offending
    field, e.g. ``Envelope.payload<CatalogItemUpserted>.title``. Both schemas are
    anything fastavro accepts as one self-contained schema (named types defined
    before use), parsed or not.
    """
    resolver = _Resolver(parse_schema(writer_old), parse_schema(reader_new))
    resolver.resolve(resolver.writer, resolver.reader, _top_path(resolver.reader))
    return resolver.problems


class ReleasedPair(NamedTuple):
    """A released schema and the current schema of the same name (``None`` if deleted)."""

    name: str
    release: str
    released: AvroSchema
    current: AvroSchema | None


def released_pairs(avro_dir: Path = AVRO_DIR) -> list[ReleasedPair]:
    """Every schema file of every release, oldest release first, with its current version."""
    pairs = []
    for release, directory in release_dirs(avro_dir):
        for path in sorted(directory.glob("*.avsc")):
            name = path.name.removesuffix(".avsc")
            current_path = avro_dir / path.name
            pairs.append(
                ReleasedPair(
                    name=name,
                    release=release,
                    released=load_named_schema(name, directory),
                    current=load_named_schema(name, avro_dir) if current_path.is_file() else None,
                )
            )
    return pairs


def check_release(pair: ReleasedPair) -> list[str]:
    """Problems reading ``pair.released`` data with the current schema, deletion included."""
    if pair.current is None:
        return [f"{pair.name}: released in {pair.release} but no current schema exists"]
    return check_backward(pair.released, pair.current)


class _Resolver:
    """One walk over a writer and a reader schema, collecting problems as it goes."""

    def __init__(self, writer: AvroSchema, reader: AvroSchema) -> None:
        self.writer = writer
        self.reader = reader
        self.problems: list[str] = []
        self._writer_types = _named_types(writer)
        self._reader_types = _named_types(reader)
        # Record pairs already checked (or being checked): recursive types end here.
        self._visited: set[tuple[str, str]] = set()

    def resolve(self, writer: AvroSchema, reader: AvroSchema, path: str) -> None:
        writer = _deref(writer, self._writer_types)
        reader = _deref(reader, self._reader_types)
        if isinstance(writer, list):
            self._resolve_writer_union(writer, reader, path)
        elif isinstance(reader, list):
            branch = self._first_match(writer, reader)
            if branch is None:
                self.problems.append(
                    f"{path}: writer type {_describe(writer)} matches no branch of reader union "
                    f"{_describe(reader)}"
                )
            else:
                self.resolve(writer, branch, path)
        elif not self._matches(writer, reader, containers_only=True):
            self.problems.append(
                f"{path}: writer type {_describe(writer)} cannot be read as {_describe(reader)}"
            )
        else:
            self._resolve_matching(writer, reader, path)

    def _resolve_writer_union(self, writer: list[Any], reader: AvroSchema, path: str) -> None:
        # Each writer branch may occur in the data, so every one must stay readable.
        for branch in writer:
            writer_branch = _deref(branch, self._writer_types)
            branch_path = f"{path}<{_label(writer_branch)}>"
            if isinstance(reader, list):
                reader_branch = self._first_match(writer_branch, reader)
                if reader_branch is None:
                    self.problems.append(
                        f"{branch_path}: union branch {_describe(writer_branch)} was removed "
                        f"(reader union is {_describe(reader)})"
                    )
                    continue
                self.resolve(writer_branch, reader_branch, branch_path)
            else:
                self.resolve(writer_branch, reader, branch_path)

    def _resolve_matching(self, writer: AvroSchema, reader: AvroSchema, path: str) -> None:
        writer_logical = _logical(writer)
        reader_logical = _logical(reader)
        if writer_logical != reader_logical:
            self.problems.append(
                f"{path}: logical type changed from {writer_logical or 'none'} to "
                f"{reader_logical or 'none'}; old values would decode to different ones"
            )
        if not isinstance(writer, dict) or not isinstance(reader, dict):
            return  # the same primitive, or a promotion: matching was the whole check
        kind = _kind(writer)
        if kind == "array":
            self.resolve(writer["items"], reader["items"], f"{path}[]")
        elif kind == "map":
            self.resolve(writer["values"], reader["values"], f"{path}{{}}")
        elif kind == "record":
            self._resolve_record(writer, reader, path)
        elif kind == "enum":
            missing = [s for s in writer["symbols"] if s not in reader["symbols"]]
            if missing and "default" not in reader:
                self.problems.append(
                    f"{path}: enum {reader['name']} lost symbols {missing} and has no default"
                )

    def _resolve_record(self, writer: dict[str, Any], reader: dict[str, Any], path: str) -> None:
        visit = (writer["name"], reader["name"])
        if visit in self._visited:
            return
        self._visited.add(visit)
        writer_fields = {field["name"]: field for field in writer["fields"]}
        for field in reader["fields"]:
            field_path = f"{path}.{field['name']}"
            names = [field["name"], *field.get("aliases", ())]
            source = next((writer_fields[n] for n in names if n in writer_fields), None)
            if source is not None:
                self.resolve(source["type"], field["type"], field_path)
            elif "default" not in field:
                self.problems.append(
                    f"{field_path}: field added without a default; old data has no value for it"
                )
        # Writer fields the reader no longer has are skipped when reading: always fine.

    def _first_match(self, writer: AvroSchema, reader_union: list[Any]) -> AvroSchema | None:
        writer = _deref(writer, self._writer_types)
        for branch in reader_union:
            candidate = _deref(branch, self._reader_types)
            if not isinstance(candidate, list) and self._matches(writer, candidate):
                return candidate
        return None

    def _matches(
        self, writer: AvroSchema, reader: AvroSchema, *, containers_only: bool = False
    ) -> bool:
        """The Avro "schemas match" test that picks a union branch; records match by name.

        With ``containers_only`` arrays and maps match on their kind alone, so that
        ``resolve`` reports a mismatch inside them at the item's own path.
        """
        writer = _deref(writer, self._writer_types)
        reader = _deref(reader, self._reader_types)
        if isinstance(writer, list) or isinstance(reader, list):
            return False
        writer_kind, reader_kind = _kind(writer), _kind(reader)
        if reader_kind in PROMOTIONS.get(writer_kind, ()):
            return True
        if writer_kind != reader_kind:
            return False
        if not isinstance(writer, dict) or not isinstance(reader, dict):
            return True  # the same primitive
        if containers_only and writer_kind in ("array", "map"):
            return True
        if writer_kind == "array":
            return self._matches(writer["items"], reader["items"])
        if writer_kind == "map":
            return self._matches(writer["values"], reader["values"])
        if writer_kind == "fixed" and writer["size"] != reader["size"]:
            return False
        if writer_kind in NAMED_KINDS:
            return _names_match(writer["name"], reader)
        return True


def _kind(schema: AvroSchema) -> str:
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, str):
        return schema
    kind = schema["type"]
    if isinstance(kind, str):
        return "record" if kind == "error" else kind
    return _kind(kind)


def _deref(schema: AvroSchema, named: dict[str, dict[str, Any]]) -> AvroSchema:
    """The definition behind a named-type reference; any other schema unchanged."""
    if isinstance(schema, str) and schema not in PRIMITIVES:
        return named[schema]
    if isinstance(schema, dict) and not isinstance(schema["type"], str):
        # {"type": {...}} wraps another schema.
        return _deref(schema["type"], named)
    return schema


def _named_types(schema: AvroSchema) -> dict[str, dict[str, Any]]:
    """Every named type defined anywhere in a parsed schema, by full name."""
    found: dict[str, dict[str, Any]] = {}
    pending: list[Any] = [schema]
    while pending:
        node = pending.pop()
        if isinstance(node, list):
            pending.extend(node)
        elif isinstance(node, dict):
            kind = node["type"]
            if not isinstance(kind, str):
                pending.append(kind)
            elif kind in NAMED_KINDS:
                found[node["name"]] = node
                pending.extend(field["type"] for field in node.get("fields", ()))
            elif kind == "array":
                pending.append(node["items"])
            elif kind == "map":
                pending.append(node["values"])
    return found


def _names_match(writer_fullname: str, reader: dict[str, Any]) -> bool:
    reader_fullname: str = reader["name"]
    namespace, _, unqualified = reader_fullname.rpartition(".")
    if writer_fullname.rpartition(".")[2] == unqualified:
        return True
    aliases = {
        alias if "." in alias or not namespace else f"{namespace}.{alias}"
        for alias in reader.get("aliases", ())
    }
    return writer_fullname in aliases


def _logical(schema: AvroSchema) -> str | None:
    """The logical type with its parameters, e.g. ``decimal(10, 2)``; None if there is none."""
    if not isinstance(schema, dict) or "logicalType" not in schema:
        return None
    parameters = [str(schema[name]) for name in _LOGICAL_PARAMETERS if name in schema]
    return (
        f"{schema['logicalType']}({', '.join(parameters)})"
        if parameters
        else str(schema["logicalType"])
    )


def _label(schema: AvroSchema) -> str:
    if isinstance(schema, dict) and _kind(schema) in NAMED_KINDS:
        return str(schema["name"]).rpartition(".")[2]
    return _kind(schema)


def _describe(schema: AvroSchema) -> str:
    if isinstance(schema, list):
        return "[" + ", ".join(_describe(branch) for branch in schema) + "]"
    if isinstance(schema, str):
        return schema
    kind = _kind(schema)
    if kind in NAMED_KINDS:
        return f"{kind} {schema['name']}"
    if kind == "array":
        return f"array<{_describe(schema['items'])}>"
    if kind == "map":
        return f"map<{_describe(schema['values'])}>"
    if "logicalType" in schema:
        return f"{kind} ({schema['logicalType']})"
    return kind


def _top_path(schema: AvroSchema) -> str:
    return _label(schema) if isinstance(schema, dict) else _describe(schema)
