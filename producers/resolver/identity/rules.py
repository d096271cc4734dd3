"""Identity rules, normalization and hashes (INV-02): pure functions, no I/O.

Normalization (``normalize_claim``): Unicode NFKC, whitespace collapsed to single
spaces and trimmed, casefolded. A GTIN-family field (``GTIN_FIELDS``) keeps only its
digits (spaces and hyphens dropped), must have a GTIN's length (8, 12, 13 or 14
digits) and a valid GS1 check digit, and is padded with leading zeros to the
canonical 14. A value that normalizes to nothing, an invalid GTIN, or a missing
field gives no identity (``None``): such an item holds no key in that generation.

``identity_hash`` is the SHA-256 (hex) of the JSON array ``[[field, value], …]`` in
rule order: JSON quoting makes the encoding unambiguous whatever the values contain.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass

from producers.resolver.exceptions import InvalidIdentity

GTIN_FIELDS = frozenset({"gtin", "gtin8", "gtin12", "gtin13", "gtin14", "ean", "upc"})
"""Claim fields (and strong-identifier schemes) holding a GTIN; as a strong
identifier every one of them is the scheme ``gtin``."""

GTIN_SCHEME = "gtin"

_WHITESPACE = re.compile(r"\s+")
_GTIN_NOISE = re.compile(r"[\s\-]")
_HASH = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class IdentityRule:
    """The claim fields whose normalized values, in this order, identify an item."""

    fields: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.fields:
            raise InvalidIdentity("an identity rule needs at least one field")
        if any(not f or f != f.strip() for f in self.fields):
            raise InvalidIdentity(f"identity rule fields must be non-blank names: {self.fields}")
        if len(set(self.fields)) != len(self.fields):
            raise InvalidIdentity(f"identity rule names a field twice: {self.fields}")


def fields_no_item_has(
    rule: IdentityRule, claim_fields: frozenset[str], carried: frozenset[str]
) -> tuple[str, ...]:
    """The rule's fields, in rule order, that are neither among ``claim_fields`` (what
    a captured product can state: its title, identifiers and attributes) nor among
    ``carried`` (what the class's active items hold now). A rule naming one can never
    match: captures never state it, and no item has it to backfill."""
    return tuple(f for f in rule.fields if f not in claim_fields and f not in carried)


def normalize_text(value: str) -> str | None:
    """NFKC, whitespace collapsed and trimmed, casefolded; None if nothing is left."""
    text = _WHITESPACE.sub(" ", unicodedata.normalize("NFKC", value)).strip().casefold()
    return text or None


def gtin_check_digit_valid(gtin14: str) -> bool:
    """GS1 check digit of a 14-digit GTIN: weights 3, 1, 3, … from the left."""
    total = sum(int(d) * (3 if i % 2 == 0 else 1) for i, d in enumerate(gtin14[:13]))
    return (10 - total % 10) % 10 == int(gtin14[13])


def normalize_gtin(value: str) -> str | None:
    """The canonical 14-digit GTIN, or None if ``value`` is not a valid GTIN.

    A GTIN has 8, 12, 13 or 14 digits (more only as extra leading zeros), not all
    zeros, and a valid check digit; shorter forms are padded with leading zeros.
    """
    digits = _GTIN_NOISE.sub("", unicodedata.normalize("NFKC", value))
    if not (digits.isascii() and digits.isdigit()):
        return None
    if len(digits) > 14:
        if digits[:-14].strip("0"):
            return None
        digits = digits[-14:]
    if len(digits) not in (8, 12, 13, 14) or not digits.strip("0"):
        return None
    gtin = digits.zfill(14)
    return gtin if gtin_check_digit_valid(gtin) else None


def normalize_claim(field_name: str, value: object) -> str | None:
    """A claim value as the identity hash sees it; None gives no identity."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    text = str(value)
    return normalize_gtin(text) if field_name in GTIN_FIELDS else normalize_text(text)


def identity_hash(rule: IdentityRule, claims: Mapping[str, str]) -> str | None:
    """SHA-256 hex of the rule's normalized claim values; None when one is missing,
    blank or (for a GTIN) invalid."""
    pairs = []
    for name in rule.fields:
        value = normalize_claim(name, claims.get(name))
        if value is None:
            return None
        pairs.append([name, value])
    encoded = json.dumps(pairs, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(encoded.encode()).hexdigest()


def normalize_strong_id(scheme: str, value: str) -> tuple[str, str] | None:
    """``(scheme, value)`` normalized: every GTIN-family scheme becomes ``gtin`` with
    the canonical 14 digits; other schemes are casefolded text. None if unusable."""
    name = normalize_text(scheme)
    if name is None:
        return None
    if name in GTIN_FIELDS:
        gtin = normalize_gtin(value)
        return (GTIN_SCHEME, gtin) if gtin else None
    text = normalize_text(value)
    return (name, text) if text else None


def strong_ids_of(attributes: Mapping[str, object]) -> dict[str, str]:
    """The strong identifiers an item's attributes carry (the GTIN family)."""
    found: dict[str, str] = {}
    for name in sorted(GTIN_FIELDS & set(attributes)):
        value = attributes[name]
        if isinstance(value, str | int) and not isinstance(value, bool):
            normalized = normalize_strong_id(name, str(value))
            if normalized is not None:
                found.setdefault(*normalized)
    return found


def check_hash(value: str) -> None:
    """Refuse anything but an identity hash: 64 lowercase hex digits."""
    if not _HASH.fullmatch(value):
        raise InvalidIdentity(f"identity hash {value!r} is not 64 lowercase hex digits")
