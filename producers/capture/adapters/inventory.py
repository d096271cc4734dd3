"""Source-field inventories: what a source states, and what becomes of each field.

A field an adapter never noticed looks exactly like a field it chose to drop. So each
adapter declares, beside the readers it describes:

* the names its source states, as a ``Literal`` alias and the tuple of its members;
* a disposition for every name: ``Stored(target)`` (where on the extracted product it
  lands) or ``excluded(reason)`` (why the item does not carry it). The adapter builds
  the mapping as a ``TypedDict`` with one key per name, so mypy refuses a missing or
  unknown name, and ``SourceFieldInventory`` refuses one again at import;
* ``list_source_fields(envelope)``, which reads a stored capture back and answers which
  of those names it states (a name outside the inventory comes back as itself, so the
  conformance test can name it).

An adapter without an inventory says so with ``PENDING_SOURCE_FIELD_INVENTORY`` and is
listed in ``source-field-inventory-baseline.json``; that list may only shrink.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Final, Generic, TypeVar, cast

from producers.capture.exceptions import InvalidInventory

BASELINE_FILE: Final = "source-field-inventory-baseline.json"

# Where a stored field can land on an ``ExtractedProduct``.
SCALAR_TARGETS: Final = frozenset({"source_item_id", "class_id", "title"})
MAPPING_TARGETS: Final = {"identity": "identifiers", "attributes": "attributes", "offer": "offer"}
_TARGET = re.compile(r"^(identity|attributes|offer)\.([a-z][a-z0-9_]*)$")


@dataclass(frozen=True, slots=True)
class Stored:
    """The field is kept: ``target`` is ``title``, ``class_id``, ``source_item_id`` or
    ``identity.<key>`` / ``attributes.<key>`` / ``offer.<key>``."""

    target: str

    def __post_init__(self) -> None:
        if self.target not in SCALAR_TARGETS and not _TARGET.match(self.target):
            raise InvalidInventory(
                f"stored target {self.target!r} is not one of {sorted(SCALAR_TARGETS)}"
                " nor identity.<key>, attributes.<key>, offer.<key>"
            )

    def locate(self) -> tuple[str, str | None]:
        """(attribute of ``ExtractedProduct``, key inside it or None for a scalar)."""
        if self.target in SCALAR_TARGETS:
            return self.target, None
        group, _, key = self.target.partition(".")
        return MAPPING_TARGETS[group], key


_EXCLUSION_TOKEN: Final = object()
_MIN_REASON_WORDS: Final = 6
# Phrases that postpone a decision instead of making one.
_NON_REASONS: Final = re.compile(
    r"\b(not\s+(read|used|parsed|handled|needed|captured|supported)\s+(today|yet|now|for\s+now)"
    r"|not\s+yet|for\s+now|todo|tbd|fixme|maybe\s+later|someday|later\s+on"
    r"|not\s+(needed|relevant|important|interesting)"
    r"|(we\s+)?(do\s+not|don't)\s+(need|care|use)\s+(it|this|that))\b",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class Excluded:
    """The field is deliberately not kept. Write it with ``excluded(reason)``."""

    reason: str
    _token: object = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._token is not _EXCLUSION_TOKEN:
            raise InvalidInventory("write an exclusion with excluded(reason)")


def excluded(reason: str) -> Excluded:
    """An exclusion with a real reason: what the field is and why the item does not
    carry it (a duplicate of a stored field, derived elsewhere, no field on the item,
    data minimisation…). A blank reason, a few words, or a postponement ("not read
    today", "TODO", "for now") is refused."""
    text = " ".join(reason.split())
    if not text:
        raise InvalidInventory("an exclusion needs a reason; a blank one says nothing")
    if len(text.split()) < _MIN_REASON_WORDS:
        raise InvalidInventory(
            f"exclusion reason {text!r} is too short to say what the field is and why"
            f" it is not kept (at least {_MIN_REASON_WORDS} words)"
        )
    postponed = _NON_REASONS.search(text)
    if postponed:
        raise InvalidInventory(
            f"exclusion reason {text!r} postpones instead of deciding ({postponed.group(0)!r})"
        )
    return Excluded(text, _EXCLUSION_TOKEN)


Disposition = Stored | Excluded

F = TypeVar("F", bound=str)


@dataclass(frozen=True, slots=True)
class SourceFieldInventory(Generic[F]):
    """Every field name a source states (``fields``) and its disposition. Total: the
    mapping's keys are exactly the names."""

    fields: tuple[F, ...]
    dispositions: Mapping[F, Disposition]

    def __post_init__(self) -> None:
        repeated = sorted({n for n in self.fields if self.fields.count(n) > 1})
        if repeated:
            raise InvalidInventory(f"source fields listed twice: {', '.join(repeated)}")
        missing = sorted(set(self.fields) - set(self.dispositions))
        unknown = sorted(set(self.dispositions) - set(self.fields))
        if missing or unknown:
            raise InvalidInventory(
                "a source-field inventory maps every field exactly once;"
                f" without a disposition: {missing or 'none'}; not a source field: "
                f"{unknown or 'none'}"
            )

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self.fields)

    def disposition(self, name: str) -> Disposition | None:
        for candidate in self.fields:
            if candidate == name:
                return self.dispositions[candidate]
        return None

    def stored(self) -> dict[str, Stored]:
        return {n: d for n, d in self.dispositions.items() if isinstance(d, Stored)}

    def claim_fields(self) -> frozenset[str]:
        """The names the source's products can state for an identity rule: ``title``
        and every ``identity.<key>`` / ``attributes.<key>`` key it stores."""
        found = set()
        for disposition in self.stored().values():
            where, key = disposition.locate()
            if where == "title":
                found.add("title")
            elif where in ("identifiers", "attributes") and key is not None:
                found.add(key)
        return frozenset(found)

    def unaccounted(self, stated: frozenset[str]) -> list[str]:
        """The names in ``stated`` this inventory has no disposition for, sorted."""
        return sorted(stated - self.names)


def inventory(fields: tuple[F, ...], dispositions: Mapping[str, object]) -> SourceFieldInventory[F]:
    """An inventory from an adapter's field tuple and its disposition ``TypedDict``
    (mypy checks the ``TypedDict`` is total; this checks it again, and the values)."""
    for name, disposition in dispositions.items():
        if not isinstance(disposition, Stored | Excluded):
            raise InvalidInventory(f"the disposition of {name!r} is neither Stored nor excluded()")
    return SourceFieldInventory(fields, cast(Mapping[F, Disposition], dispositions))


class PendingInventory(enum.Enum):
    """The one sanctioned way for an adapter to have no inventory yet; every adapter
    using it is listed in the baseline file, which may only shrink."""

    PENDING = "pending"


PENDING_SOURCE_FIELD_INVENTORY: Final = PendingInventory.PENDING


def baseline_problems(
    inventories: Mapping[str, SourceFieldInventory[Any] | PendingInventory],
    baseline: frozenset[str],
) -> list[str]:
    """What breaks the ratchet, given each adapter's inventory by adapter name: a pending
    adapter the baseline does not list, and a baseline entry that has since enrolled
    (or no longer exists). Empty when the baseline is exactly the pending adapters."""
    pending = {name for name, held in inventories.items() if held is PENDING_SOURCE_FIELD_INVENTORY}
    problems = [
        f"{name}: has no source-field inventory and is not listed in {BASELINE_FILE}"
        for name in sorted(pending - baseline)
    ]
    problems += [
        f"{name}: enrolled a source-field inventory; delete its line from {BASELINE_FILE}"
        for name in sorted(baseline - pending)
        if name in inventories
    ]
    problems += [
        f"{name}: listed in {BASELINE_FILE} but no adapter has that name"
        for name in sorted(baseline - set(inventories))
    ]
    return problems


def pending_inventory_baseline() -> frozenset[str]:
    """The adapter names allowed to be pending, from the baseline file."""
    text = resources.files(__package__).joinpath(BASELINE_FILE).read_text(encoding="utf-8")
    names = json.loads(text)
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise InvalidInventory(f"{BASELINE_FILE} must be a JSON list of adapter names")
    if len(set(names)) != len(names):
        raise InvalidInventory(f"{BASELINE_FILE} names an adapter twice")
    return frozenset(names)
