"""The parts of an ``html-jsonld`` capture, read (no mapping to products here).

* the page (``document``): decoded by its charset, its ``<script
  type="application/ld+json">`` blocks parsed into nodes (a block is a node, a list of
  nodes, or an object with ``@graph``; a non-product node's ``mainEntity`` is looked
  into as well), with its OpenGraph/``product:`` meta properties and microdata item
  properties;
* the ``offers`` part: its entries by ``sku``.

``html_jsonld`` maps what is read here to products and to source-field names.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any, Final

from producers.capture.adapters.normalize import pointer
from producers.capture.exceptions import MalformedCapture, UnsupportedContent
from producers.capture.raw import DOCUMENT_ROLE, RawEnvelope, RawPart, media_essence

OFFERS_ROLE: Final = "offers"


class _PageReader(HTMLParser):
    """Collects JSON-LD blocks, OpenGraph/product meta properties and microdata
    item properties of an HTML page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[str] = []
        self.meta: set[str] = set()
        self.itemprops: set[str] = set()
        self._block: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        if "itemprop" in values and values["itemprop"].strip():
            self.itemprops.update(values["itemprop"].split())
        if tag == "script" and media_essence(values.get("type", "")) == "application/ld+json":
            self._block = []
        elif tag == "meta" and values.get("content", "").strip():
            key = (values.get("property") or values.get("name") or "").strip().lower()
            if key.startswith(("og:", "product:")):
                self.meta.add(key)

    def handle_data(self, data: str) -> None:
        if self._block is not None:
            self._block.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "script" and self._block is not None:
            self.blocks.append("".join(self._block))
            self._block = None


@dataclass(frozen=True, slots=True)
class Node:
    """One top-level JSON-LD node of the page, with where it was found."""

    locator: str
    value: dict[str, Any]

    @property
    def types(self) -> tuple[str, ...]:
        declared = self.value.get("@type")
        names = declared if isinstance(declared, list) else [declared]
        return tuple(_short_type(n) for n in names if isinstance(n, str) and n.strip())

    @property
    def is_product(self) -> bool:
        return "Product" in self.types


def _short_type(name: str) -> str:
    for prefix in ("https://schema.org/", "http://schema.org/", "schema:"):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


@dataclass(frozen=True, slots=True)
class Page:
    """What an HTML page states: its JSON-LD nodes, meta properties and itemprops."""

    nodes: tuple[Node, ...]
    meta: frozenset[str]
    itemprops: frozenset[str]


def read_page(part: RawPart) -> Page:
    """The page ``part`` holds (an HTML document; the caller checked its type)."""
    html = _decode(part)
    reader = _PageReader()
    reader.feed(html)
    reader.close()
    nodes: list[Node] = []
    for index, block in enumerate(reader.blocks):
        try:
            data = json.loads(block)
        except (ValueError, RecursionError) as exc:
            raise MalformedCapture(f"JSON-LD block {index} of the page is not JSON: {exc}") from exc
        nodes.extend(_nodes(data, f"{DOCUMENT_ROLE}#script[{index}]"))
    return Page(tuple(nodes), frozenset(reader.meta), frozenset(reader.itemprops))


def _decode(part: RawPart) -> str:
    charset = "utf-8"
    for param in part.content_type.split(";")[1:]:
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip('"').lower()
    try:
        encoding = codecs.lookup(charset).name
        return part.body.decode("utf-8-sig" if encoding == "utf-8" else encoding)
    except (LookupError, UnicodeDecodeError) as exc:
        raise MalformedCapture(f"the page does not decode as {charset}: {exc}") from exc


def _nodes(data: Any, locator: str) -> Iterator[Node]:
    """Top-level nodes of one JSON-LD block: the node itself, each node of a list or of
    ``@graph``, and a node's ``mainEntity``; a bare ``{"@id"}`` reference is skipped."""
    if isinstance(data, list):
        for index, item in enumerate(data):
            yield from _nodes(item, f"{locator}{pointer(index)}")
    elif isinstance(data, dict):
        graph = data.get("@graph")
        if isinstance(graph, list):
            for index, item in enumerate(graph):
                yield from _nodes(item, f"{locator}{pointer('@graph', index)}")
            return
        if set(data) == {"@id"}:
            return  # a reference to a node stated elsewhere, not a node
        node = Node(locator, data)
        yield node
        entity = data.get("mainEntity")
        if not node.is_product and isinstance(entity, dict | list):
            yield from _nodes(entity, f"{locator}{pointer('mainEntity')}")
    else:
        raise MalformedCapture(f"{locator}: a JSON-LD node is an object, not {type(data).__name__}")


def offers_by_sku(envelope: RawEnvelope) -> dict[str, list[dict[str, Any]]]:
    """The offers part's entries by sku; empty when the capture has no offers part."""
    part = envelope.get(OFFERS_ROLE)
    if part is None:
        return {}
    body = offers_body(part)
    by_sku: dict[str, list[dict[str, Any]]] = {}
    for index, item in enumerate(body["items"]):
        if not isinstance(item, dict):
            raise MalformedCapture(f"offers item {index} is not an object")
        sku = item.get("sku")
        if isinstance(sku, str) and sku.strip():
            by_sku.setdefault(sku.strip(), []).append(item)
    return by_sku


def offers_body(part: RawPart) -> dict[str, Any]:
    """The offers part's JSON: an object with an ``items`` list."""
    if media_essence(part.content_type) != "application/json":
        raise UnsupportedContent(f"the offers part is application/json, not {part.content_type!r}")
    try:
        body = json.loads(part.body)
    except (ValueError, RecursionError) as exc:
        raise MalformedCapture(f"the offers part is not JSON: {exc}") from exc
    if not isinstance(body, dict) or not isinstance(body.get("items"), list):
        raise MalformedCapture("the offers part is an object with an items list")
    return body
