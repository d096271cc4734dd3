"""What settling a product reads of its catalog, read once per transaction, and for
a whole batch of products in a few statements.

Resolving one product reads its source item's newest result, its identity key in
the pinned generation, the key holder's strong identifiers, who holds each strong
identifier it claims, the item it names and its listing's mapping: six round trips a
product when asked one at a time. ``CatalogReads.load`` answers them for every
product of a batch with one statement each (``resolution.prefetch``); what was not
loaded is read when asked, once.

What was read stays true for the transaction because every writer of this state
holds the stream's cursor lock, which the batch's transaction holds from before the
load until it ends, except the batch's own writes. So each product records what it
read (``taken``), and a product that read anything an earlier product of the same
transaction wrote is not settled in it (``settling``): it starts the next batch,
whose load reads it afresh.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from db.repositories import capture_items as results
from db.repositories import catalog_items, identity_lookups, listing_mappings
from db.repositories import identity as identity_rows
from db.repositories import strong_ids as strong_id_rows
from db.repositories.capture_items import SourceItemVersion
from db.repositories.catalog_items import ItemRow
from db.repositories.identity import GenerationKey, KeyMatch
from db.repositories.listing_mappings import MappingRow
from db.unit_of_work import UnitOfWork

Read = tuple[Any, ...]
"""What was read, as ``("item", tenant, catalog, item_id)``, ``("mapping", …,
listing_id)``, ``("key", …, class, generation, hash)``, ``("strong", …, item_id)``,
``("holders", …, scheme, value)`` or ``("source_item", tenant, source, id)``."""

T = TypeVar("T")
_MEMO = ("capture_reads",)


def item_read(tenant_id: str, catalog_id: str, item_id: str) -> Read:
    return ("item", tenant_id, catalog_id, item_id)


def mapping_read(tenant_id: str, catalog_id: str, listing_id: str) -> Read:
    return ("mapping", tenant_id, catalog_id, listing_id)


def key_read(key: GenerationKey, identity_hash: str) -> Read:
    return ("key", *key.params(), identity_hash)


def strong_read(tenant_id: str, catalog_id: str, item_id: str) -> Read:
    return ("strong", tenant_id, catalog_id, item_id)


def holders_read(tenant_id: str, catalog_id: str, scheme: str, value: str) -> Read:
    return ("holders", tenant_id, catalog_id, scheme, value)


def source_item_read(tenant_id: str, source: str, source_item_id: str) -> Read:
    return ("source_item", tenant_id, source, source_item_id)


class CatalogReads:
    """The reads of one transaction (``of``); also the ``KeyReads`` of its identity
    lookups."""

    def __init__(self, uow: UnitOfWork) -> None:
        self._uow = uow
        self._known: dict[Read, Any] = {}
        self.taken: set[Read] = set()
        """What was read since ``begin``."""

    @classmethod
    def of(cls, uow: UnitOfWork) -> CatalogReads:
        """The transaction's reads (kept in ``uow.memo``, so they end with it)."""
        reads = uow.memo.get(_MEMO)
        if not isinstance(reads, CatalogReads):
            reads = uow.memo[_MEMO] = cls(uow)
        return reads

    def begin(self) -> None:
        """Start recording what one product reads."""
        self.taken = set()

    def _read(self, read: Read, fetch: Callable[[], T]) -> T:
        self.taken.add(read)
        if read not in self._known:
            self._known[read] = fetch()
        value: T = self._known[read]
        return value

    def load(self, answers: Iterable[tuple[Read, Any]]) -> None:
        """Answers read ahead (``None``: known to be absent)."""
        self._known.update(answers)

    # --- the reads -------------------------------------------------------------------

    def find_key(self, key: GenerationKey, identity_hash: str) -> KeyMatch | None:
        found = self._read(
            key_read(key, identity_hash),
            lambda: identity_rows.find_key(self._uow.tx, key, identity_hash),
        )
        if found is not None:  # the key's row joins its item's status
            self.taken.add(item_read(key.tenant_id, key.catalog_id, found.item_id))
        return found

    def strong_ids(self, tenant_id: str, catalog_id: str, item_id: str) -> dict[str, str]:
        return self._read(
            strong_read(tenant_id, catalog_id, item_id),
            lambda: strong_id_rows.strong_ids(self._uow.tx, tenant_id, catalog_id, item_id),
        )

    def strong_id_holders(
        self, tenant_id: str, catalog_id: str, scheme: str, value: str
    ) -> list[str]:
        return self._read(
            holders_read(tenant_id, catalog_id, scheme, value),
            lambda: strong_id_rows.strong_id_holders(
                self._uow.tx, tenant_id, catalog_id, scheme, value
            ),
        )

    def item(self, tenant_id: str, catalog_id: str, item_id: str) -> ItemRow | None:
        return self._read(
            item_read(tenant_id, catalog_id, item_id),
            lambda: catalog_items.get(self._uow.tx, tenant_id, catalog_id, item_id),
        )

    def mapping(self, tenant_id: str, catalog_id: str, listing_id: str) -> MappingRow | None:
        return self._read(
            mapping_read(tenant_id, catalog_id, listing_id),
            lambda: listing_mappings.get(self._uow.tx, tenant_id, catalog_id, listing_id),
        )

    def source_item(
        self, tenant_id: str, source: str, source_item_id: str
    ) -> SourceItemVersion | None:
        return self._read(
            source_item_read(tenant_id, source, source_item_id),
            lambda: results.source_item(self._uow.tx, tenant_id, source, source_item_id),
        )

    # --- a batch's reads, one statement each ---------------------------------------------

    def load_batch(
        self,
        tenant_id: str,
        catalog_id: str,
        source: str,
        source_item_ids: list[str],
        keys: list[tuple[str, int, str]],
        claimed: list[tuple[str, str]],
        listing_ids: list[str],
        new_item_ids: list[str],
    ) -> None:
        """Read ahead, for a batch: the source items' newest results, the keys of
        (class, generation, hash), the holders of the claimed strong identifiers, the
        listings' mappings; then the found keys' items and their strong identifiers,
        and the items new keys would create."""
        t, c, tx = tenant_id, catalog_id, self._uow.tx
        newest = results.source_items(tx, t, source, source_item_ids)
        self.load((source_item_read(t, source, i), newest.get(i)) for i in source_item_ids)
        found = identity_lookups.find_keys(tx, t, c, keys)
        self.load(
            (key_read(GenerationKey(t, c, klass, g), h), found.get((klass, g, h)))
            for klass, g, h in keys
        )
        held = identity_lookups.holders_of(tx, t, c, claimed)
        self.load((holders_read(t, c, s, v), held.get((s, v), [])) for s, v in claimed)
        # Under the cursor lock (``prefetch``): what is absent is recorded so.
        mapped = listing_mappings.get_many(tx, t, c, listing_ids, cursor_locked=True)
        self.load((mapping_read(t, c, i), mapped.get(i)) for i in listing_ids)
        holders = sorted({k.item_id for k in found.values()})
        strong = identity_lookups.strong_ids_of_items(tx, t, c, holders)
        self.load((strong_read(t, c, i), strong.get(i, {})) for i in holders)
        items = sorted({*holders, *new_item_ids})
        rows = catalog_items.get_many(tx, t, c, items, cursor_locked=True)
        self.load((item_read(t, c, i), rows.get(i)) for i in items)
