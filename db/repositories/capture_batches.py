"""A batch of capture results written together: the outcomes (with their claims) and
the source items' newest versions of every product of a batch, one statement each.

The capture worker settles a batch's products in one transaction and writes these
rows of all of them just before it commits (``producers.capture.worker.settling``);
each statement writes what ``db.repositories.capture_items``' function of the same
purpose writes for one product. All the results are of one run: one tenant,
capture and parser version, no source item twice.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from db.repositories.capture_items import (
    NEWER_VERSION_WINS,
    Claims,
    ResultKey,
    SourceItemVersion,
    claims_column,
)
from db.unit_of_work import Transaction


@dataclass(frozen=True, slots=True)
class Settled:
    """A result's terminal outcome (``capture_items.settle``'s arguments)."""

    key: ResultKey
    outcome: str
    item_id: str | None = None
    decision_id: uuid.UUID | None = None
    case_id: str | None = None
    error_code: str | None = None
    error: str | None = None
    claims: Claims = ()


def settle(tx: Transaction, settled: Sequence[Settled]) -> None:
    """Give each result its terminal outcome; deferred, like ``capture_items.settle``."""
    if not settled:
        return
    head = settled[0].key
    tx.defer(
        "UPDATE capture_item AS r SET outcome = u.outcome, next_attempt_at = NULL,"
        " error_code = u.error_code, last_error = u.error, item_id = u.item_id,"
        " decision_id = u.decision_id, case_id = u.case_id, claims = u.claims,"
        " updated_at = clock_timestamp()"
        " FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::text[],"
        " %b::uuid[], %b::text[], %b::jsonb[])"
        " AS u(source_item_id, outcome, error_code, error, item_id, decision_id, case_id,"
        " claims)"
        # Each row found by one primary-key lookup, then updated by its tid: joined on
        # the key, a new capture's young statistics make the planner scan all of its
        # rows per batch. The rows are this transaction's (``lock_many``), so the tid
        # read is the version updated.
        " CROSS JOIN LATERAL (SELECT ctid AS tid FROM capture_item c"
        " WHERE c.tenant_id = %s AND c.capture_id = %s AND c.source_item_id = u.source_item_id"
        " AND c.parser_version = %s LIMIT 1) f WHERE r.ctid = f.tid",
        (
            [s.key.source_item_id for s in settled],
            [s.outcome for s in settled],
            [s.error_code for s in settled],
            [s.error for s in settled],
            [s.item_id for s in settled],
            [s.decision_id for s in settled],
            [s.case_id for s in settled],
            [claims_column(s.claims) for s in settled],
            head.tenant_id,
            head.capture_id,
            head.parser_version,
        ),
    )


def advance_source_items(tx: Transaction, versions: Sequence[SourceItemVersion]) -> int:
    """``capture_items.advance_source_item`` for each of ``versions`` (distinct source
    items of one tenant and source) in one statement; returns how many became the
    newest (the others lost to newer work, and nothing of them changed)."""
    if not versions:
        return 0
    v = versions[0]
    rows = tx.execute(
        "INSERT INTO source_item_state AS s (tenant_id, source, source_item_id, catalog_id,"
        " captured_at, capture_created_at, capture_id, parser_version, schema_version,"
        " fingerprint, item_id)"
        " SELECT %s, %s, n.source_item_id, n.catalog_id, n.captured_at, n.capture_created_at,"
        " n.capture_id, n.parser_version, n.schema_version, n.fingerprint, n.item_id"
        " FROM unnest(%b::text[], %b::text[], %b::timestamptz[], %b::timestamptz[],"
        " %b::uuid[], %b::int[], %b::int[], %b::text[], %b::text[])"
        " AS n(source_item_id, catalog_id, captured_at, capture_created_at, capture_id,"
        " parser_version, schema_version, fingerprint, item_id)" + NEWER_VERSION_WINS,
        (
            v.tenant_id,
            v.source,
            [x.source_item_id for x in versions],
            [x.catalog_id for x in versions],
            [x.captured_at for x in versions],
            [x.capture_created_at for x in versions],
            [x.capture_id for x in versions],
            [x.parser_version for x in versions],
            [x.schema_version for x in versions],
            [x.fingerprint for x in versions],
            [x.item_id for x in versions],
        ),
    ).fetchall()
    return len(rows)
