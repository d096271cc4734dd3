"""Request and response bodies of the resolver's operator endpoints (the OpenAPI
contract). Request models build the domain's own dataclasses (``Decision`` and its
facts), whose checks then run exactly as for any other caller of the write path.

Response models read the rows they answer with by attribute
(``from_attributes``): ``Model.model_validate(row)`` for a row with the same field
names. Only a body whose fields come from elsewhere is built explicitly. Models
carry no class docstring: pydantic would publish it as the schema's description."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
)

from producers.resolver.attributes.facts import (
    DefineAttribute,
    DefineClass,
    PublishAttribute,
    SetAttributeValue,
)
from producers.resolver.attributes.rules import MAX_LABEL, MAX_VALUE, MAX_VERSION
from producers.resolver.facts import Fact
from producers.resolver.listing_mappings import MapListing
from producers.resolver.shipping_policies import VersionShippingPolicy
from producers.resolver.splits import SplitItem, Successor
from schemas.events import EvidenceRef
from schemas.http.fields import UtcDatetime

Id = Annotated[str, Field(min_length=1, max_length=200)]
MAX_FACTS = 100


# --- requests ------------------------------------------------------------------------


class Evidence(BaseModel):
    capture_id: Id = Field(description="The capture the evidence is in.")
    locator: str = Field(min_length=1, max_length=1000, description="Where inside the capture.")

    def to_domain(self) -> EvidenceRef:
        return EvidenceRef(capture_id=self.capture_id, locator=self.locator)


class MapListingFact(BaseModel):
    kind: Literal["map_listing"]
    listing_id: Id
    item_id: Id = Field(description="The target item; it must be active (INV-01).")

    def to_domain(self) -> MapListing:
        return MapListing(self.listing_id, self.item_id)


class ShippingPolicyFact(BaseModel):
    kind: Literal["shipping_policy_version"]
    policy_id: Id
    scope: Id
    effective_from: UtcDatetime
    effective_to: UtcDatetime | None = Field(default=None, description="null: open-ended")
    terms: dict[str, str] = Field(default_factory=dict)

    def to_domain(self) -> VersionShippingPolicy:
        return VersionShippingPolicy(
            self.policy_id, self.scope, self.effective_from, self.effective_to, self.terms
        )


class SuccessorBody(BaseModel):
    item_id: Id = Field(description="A new item id.")
    title: str = Field(min_length=1, max_length=1000)
    attributes: dict[str, str] = Field(default_factory=dict)

    def to_domain(self) -> Successor:
        return Successor(self.item_id, self.title, self.attributes)


class SplitSpec(BaseModel):
    successors: list[SuccessorBody] = Field(min_length=1, max_length=MAX_FACTS)
    remaps: dict[str, str] = Field(
        default_factory=dict,
        description="listing id → successor item id; must move every listing mapped to"
        " the source item.",
    )


class SplitFact(SplitSpec):
    kind: Literal["split_item"]
    source_item_id: Id

    def to_domain(self) -> SplitItem:
        return split_fact(self.source_item_id, self)


def split_fact(source_item_id: str, spec: SplitSpec) -> SplitItem:
    return SplitItem(
        source_item_id, tuple(s.to_domain() for s in spec.successors), dict(spec.remaps)
    )


class DefineClassFact(BaseModel):
    kind: Literal["define_class"]
    class_id: Id
    parent_class_id: Id | None = Field(
        default=None, description="A registered class of the catalog; null for a root."
    )

    def to_domain(self) -> DefineClass:
        return DefineClass(self.class_id, self.parent_class_id)


Version = Annotated[int, Field(ge=1, le=MAX_VERSION)]


class DefineAttributeFact(BaseModel):
    kind: Literal["define_attribute"]
    attribute_key: Id = Field(description="Letters, digits and '_.:-' (no slash).")
    version: Version = Field(description="A version this key does not have yet.")
    label: str = Field(min_length=1, max_length=MAX_LABEL)
    value_type: Literal["text", "number", "boolean", "enum"]
    allowed_values: list[Id] = Field(
        default_factory=list, max_length=MAX_FACTS, description="An enum's values; else none."
    )
    applies_to: list[Id] = Field(
        min_length=1,
        max_length=MAX_FACTS,
        description="Classes it applies to, each with all its descendant classes.",
    )
    publish: bool = Field(default=False, description="Define it published (else a draft).")

    def to_domain(self) -> DefineAttribute:
        return DefineAttribute(
            self.attribute_key,
            self.version,
            self.label,
            self.value_type,
            tuple(self.applies_to),
            tuple(self.allowed_values),
            self.publish,
        )


class PublishAttributeFact(BaseModel):
    kind: Literal["publish_attribute"]
    attribute_key: Id
    version: Version

    def to_domain(self) -> PublishAttribute:
        return PublishAttribute(self.attribute_key, self.version)


class SetAttributeValueFact(BaseModel):
    kind: Literal["set_attribute_value"]
    item_id: Id = Field(description="An active item (INV-07 also needs its class).")
    attribute_key: Id
    version: Version = Field(description="A published definition version (INV-07).")
    value: StrictBool | StrictInt | StrictFloat | Annotated[str, Field(max_length=MAX_VALUE)] = (
        Field(description="A string, number or boolean, as the definition's type wants.")
    )

    def to_domain(self) -> SetAttributeValue:
        return SetAttributeValue(self.item_id, self.attribute_key, self.version, self.value)


FactBody = Annotated[
    MapListingFact
    | ShippingPolicyFact
    | SplitFact
    | DefineClassFact
    | DefineAttributeFact
    | PublishAttributeFact
    | SetAttributeValueFact,
    Field(discriminator="kind"),
]


class DecisionBasis(BaseModel):
    """Who decided, why, and on what: common to every decision request.

    The actor is taken from the body: an operator token identifies a set of tenants,
    not a person, so the API has no identity to take it from.
    """

    actor: Id = Field(description="Who decided, e.g. 'reviewer:ana'.")
    rationale: str = Field(min_length=1, max_length=10_000)
    evidence: list[Evidence] = Field(
        min_length=1, max_length=MAX_FACTS, description="At least one capture + locator."
    )
    prior_decision_ids: list[uuid.UUID] = Field(
        default_factory=list,
        max_length=MAX_FACTS,
        description="Earlier decisions this one rests on or corrects.",
    )


class DecisionRequest(DecisionBasis):
    expected_revision: int = Field(
        ge=1, description="The case revision the decision was made against (INV-04)."
    )
    action: Id = Field(description="What was decided, e.g. 'accept', 'map', 'reject'.")
    facts: list[FactBody] = Field(default_factory=list, max_length=MAX_FACTS)

    def domain_facts(self) -> tuple[Fact, ...]:
        return tuple(f.to_domain() for f in self.facts)


class CaseRef(BaseModel):
    case_id: Id
    expected_revision: int = Field(ge=1)


class SplitRequest(DecisionBasis, SplitSpec):
    case: CaseRef | None = Field(
        default=None,
        description="The review case the split decides, at the revision it was made"
        " against; null for a split outside any case.",
    )


# --- responses -----------------------------------------------------------------------


class ReviewCase(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    case_id: str
    subject_type: str
    subject_id: str
    status: Literal["open", "decided"]
    revision: int = Field(description="Send this as expected_revision with a decision.")


class CasePage(BaseModel):
    cases: list[ReviewCase] = Field(description="In case-id order.")
    next_after: str | None = Field(
        description="Pass as `after` for the next page; null on the last page."
    )


class DecisionBody(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    decision_id: uuid.UUID
    action: str
    actor: str
    actor_kind: str
    rationale: str
    evidence: list[Evidence]
    case_id: str | None
    case_revision: int | None = Field(description="The case revision it was made against.")
    prior_decision_ids: list[uuid.UUID]
    decided_at: datetime


class CaseDetail(ReviewCase):
    decisions: list[DecisionBody] = Field(description="Oldest first.")


class AggregateRevision(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    type: str
    id: str
    revision: int


class DecisionRecordedBody(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    decision_id: uuid.UUID
    case_revision: int | None = Field(description="The case's revision after the decision.")
    aggregates: list[AggregateRevision] = Field(
        description="Every aggregate revision the decision produced an event for, in order."
    )


class DecisionHistory(BaseModel):
    item_id: str
    decisions: list[DecisionBody] = Field(description="Oldest first (by decision time).")
