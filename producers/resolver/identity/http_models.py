"""Request and response bodies of the identity-generation endpoints (the OpenAPI
contract). Requests build the domain's facts, whose checks then run as for any other
caller of the write path. Responses follow ``producers.resolver.http_models``:
``model_validate(row)`` where a row has the body's fields, explicit where not."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from db.repositories.identity import GenerationRow
from producers.resolver.http_models import DecisionBasis, Id
from producers.resolver.identity.generations import BackfillReport
from producers.resolver.identity.queries import GenerationState
from producers.resolver.identity.rules import IdentityRule

MAX_RULE_FIELDS = 20
FieldName = Annotated[str, Field(min_length=1, max_length=200)]


# --- requests ------------------------------------------------------------------------


class GenerationRequest(BaseModel):
    class_id: Id = Field(description="The item class the rule identifies.")
    rule_fields: list[FieldName] = Field(
        min_length=1,
        max_length=MAX_RULE_FIELDS,
        description="The claim fields whose normalized values, in this order, identify"
        " an item, e.g. ['brand', 'mpn'] or ['gtin'].",
    )

    def rule(self) -> IdentityRule:
        return IdentityRule(tuple(self.rule_fields))


class ApprovalRequest(DecisionBasis):
    expected_revision: int = Field(
        ge=1,
        description="The generation revision the approver reviewed; any backfill or"
        " collision resolution since then makes the approval stale (409 STALE_REVISION).",
    )


class ResolutionRequest(DecisionBasis):
    holder_item_id: Id | None = Field(
        description="The candidate item that holds the key in this generation; null: none"
        " of them does (each needs its own split or merge decision).",
    )


# --- responses -----------------------------------------------------------------------


class Generation(BaseModel):
    class_id: str
    generation: int
    rule_fields: list[str]
    status: Literal["backfilling", "ready", "active", "retired"]
    revision: int = Field(description="Send this as expected_revision with an approval.")
    item_count: int | None = Field(description="Active items the last backfill hashed.")
    key_count: int = Field(description="Ready or active keys.")
    unresolved_collisions: int
    created_at: datetime
    backfilled_at: datetime | None
    activated_at: datetime | None = Field(description="Active from this time on…")
    retired_at: datetime | None = Field(description="…until this time (exclusive).")
    activation_decision_id: uuid.UUID | None = Field(
        description="The human decision that approved the activation."
    )

    @classmethod
    def of(cls, state: GenerationState) -> Generation:
        """Explicit: the class and number are the row's key's, the counts are not
        the row's."""
        row: GenerationRow = state.row
        return cls(
            class_id=row.key.class_id,
            generation=row.key.generation,
            rule_fields=list(row.rule_fields),
            status=row.status,  # type: ignore[arg-type]  # the table's CHECK constraint
            revision=row.revision,
            item_count=row.item_count,
            key_count=state.key_count,
            unresolved_collisions=state.unresolved_collisions,
            created_at=row.created_at,
            backfilled_at=row.backfilled_at,
            activated_at=row.activated_at,
            retired_at=row.retired_at,
            activation_decision_id=row.activation_decision_id,
        )


class Collision(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    identity_hash: str
    candidate_item_ids: list[str] = Field(description="The items sharing the hash.")
    holder_item_id: str | None
    decision_id: uuid.UUID | None = Field(description="The resolving decision; null: open.")
    resolved_at: datetime | None


class GenerationDetail(Generation):
    collisions: list[Collision] = Field(description="By hash, resolved or not.")


class GenerationList(BaseModel):
    generations: list[Generation] = Field(description="By class, then generation.")


class Backfill(BaseModel):
    generation: Generation
    item_count: int = Field(description="Active items of the class hashed.")
    key_count: int = Field(description="Ready keys written (hashes one item holds).")
    collision_count: int = Field(description="Hashes several items share: resolve each.")
    unkeyed_item_count: int = Field(
        description="Items lacking a rule field (or with an invalid GTIN): no key."
    )

    @classmethod
    def of(cls, report: BackfillReport, state: GenerationState) -> Backfill:
        """Explicit: the report's counts with the generation as read after it."""
        return cls(
            generation=Generation.of(state),
            item_count=report.item_count,
            key_count=report.key_count,
            collision_count=report.collision_count,
            unkeyed_item_count=report.unkeyed_item_count,
        )
