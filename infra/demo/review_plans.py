"""The workload's review decisions: a reviewer maps a listing under a review case;
a second reviewer deciding the same revision is refused as stale, and now and then
the first corrects the mapping at the next revision."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable

from infra.demo.catalog_picture import REVIEWERS, Catalog, Step, active_items, evidence
from producers.resolver.decisions import Decision
from producers.resolver.listing_mappings import MapListing
from producers.resolver.review_cases import CaseRevision


def review(
    c: Catalog,
    rng: random.Random,
    record: Callable[[Step, random.Random], uuid.UUID | None],
    open_: Callable[[str], None],
) -> None:
    """A reviewer maps a listing under a review case at revision 1. Half the time a
    second reviewer, who read the same revision, decides too and is refused as stale;
    a quarter of the time the first reviewer then corrects the mapping at revision 2."""
    with c.lock:
        active = active_items(c)
        if len(active) < 2:
            return
        listing = c.new_id("L")
        first, second = rng.sample(active, 2)
    case = f"case-{listing}"
    open_(case)

    def human(reviewer: str, item: str, revision: int, *prior: uuid.UUID) -> Step:
        def committed() -> None:
            with c.lock:
                c.listings[listing] = item

        decision = Decision(
            c.tenant_id,
            c.catalog_id,
            "correct" if prior else "map",
            reviewer,
            "the listing shows this product",
            evidence(rng, "$.title"),
            facts=(MapListing(listing, item),),
            case=CaseRevision(case, revision),
            prior_decision_ids=prior,
        )
        return Step("review", decision, committed)

    decided = record(human(REVIEWERS[0], first, 1), rng)
    if decided is None:
        return
    if rng.random() < 0.5:
        record(human(REVIEWERS[1], second, 1), rng)  # refused: STALE_REVISION
    if rng.random() < 0.25:
        record(human(REVIEWERS[0], second, 2, decided), rng)
