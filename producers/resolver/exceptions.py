"""Typed errors of the resolver domain; ``code`` is stable and machine-readable."""

from __future__ import annotations

import psycopg.errors

from db.tables.attributes import NOT_APPLICABLE, NOT_PUBLISHED, VALUE_INVALID
from schemas.errors import GaplessError


class DomainError(GaplessError):
    code = "DOMAIN_ERROR"
    http_status = 422


class ItemNotFound(DomainError):
    code = "ITEM_NOT_FOUND"
    http_status = 404


class ParentNotActive(DomainError):
    """The item an item depends on does not exist or is not active."""

    code = "PARENT_NOT_ACTIVE"
    http_status = 409


class StaleRevision(DomainError):
    """A decision was made against a review-case revision that is no longer current
    (INV-04): someone else decided first. Reload the case and decide again."""

    code = "STALE_REVISION"
    http_status = 409


class CaseNotFound(DomainError):
    code = "CASE_NOT_FOUND"
    http_status = 404


class CaseAlreadyExists(DomainError):
    code = "CASE_ALREADY_EXISTS"
    http_status = 409


class EvidenceRequired(DomainError):
    """A decision must rest on at least one evidence reference (capture + locator).
    (Its code was ``EVIDENCE_MISSING`` before 2026-12, which now names only an artifact
    missing from the evidence bucket.)"""

    code = "EVIDENCE_REQUIRED"
    http_status = 422


class EvidenceExpired(DomainError):
    """A capture the decision cites was deleted by evidence retention while the
    decision was being recorded; nothing was stored. Cite a capture that is kept."""

    code = "EVIDENCE_EXPIRED"
    http_status = 409


class InvalidDecision(DomainError):
    """The decision itself is malformed (empty action or actor, unknown actor kind)."""

    code = "INVALID_DECISION"
    http_status = 422


class PriorDecisionNotFound(DomainError):
    """A decision names an earlier decision this tenant and catalog do not have."""

    code = "PRIOR_DECISION_NOT_FOUND"
    http_status = 422


class TargetNotActive(DomainError):
    """A listing mapping's target item is missing or not active (INV-01)."""

    code = "TARGET_NOT_ACTIVE"
    http_status = 409


class InvalidPolicyWindow(DomainError):
    """A shipping policy version's window ends before it starts."""

    code = "INVALID_POLICY_WINDOW"
    http_status = 422


class OverlappingPolicyWindow(DomainError):
    """A shipping policy version's window overlaps another version of the same
    policy and scope (INV-03, the exclusion constraint)."""

    code = "OVERLAPPING_POLICY_WINDOW"
    http_status = 409


class InvalidSplit(DomainError):
    """A split without successors, with the source among them, or with remaps that do
    not move every listing of the source onto a successor."""

    code = "INVALID_SPLIT"
    http_status = 422


class SourceNotActive(DomainError):
    """Only an active item can be split (INV-08)."""

    code = "SOURCE_NOT_ACTIVE"
    http_status = 409


class ItemAlreadyExists(DomainError):
    """A split's successor must be a new item."""

    code = "ITEM_ALREADY_EXISTS"
    http_status = 409


# --- identity generations and keys (INV-02) -----------------------------------------


class InvalidIdentity(DomainError):
    """A malformed identity rule (no fields, blank or repeated names), identity hash
    (not 64 lowercase hex digits) or key assignment (the item's class differs)."""

    code = "INVALID_IDENTITY"
    http_status = 422


class UnknownIdentityField(DomainError):
    """An identity rule names a field no item of the class can carry: no registered
    adapter stores it on a captured product and no active item of the class has it,
    so the rule could never match. Nothing is stored."""

    code = "UNKNOWN_IDENTITY_FIELD"
    http_status = 422


class GenerationNotFound(DomainError):
    code = "GENERATION_NOT_FOUND"
    http_status = 404


class GenerationConflict(DomainError):
    """Another generation of the same class was created at the same moment and took
    the number; create again."""

    code = "GENERATION_CONFLICT"
    http_status = 409


class BackfillIncomplete(DomainError):
    """The generation is still backfilling: its keys are not all computed yet."""

    code = "BACKFILL_INCOMPLETE"
    http_status = 409


class BackfillStale(DomainError):
    """Items of the class changed since the backfill (new, changed, split or retired
    items): run the backfill again, resolve its collisions, then approve."""

    code = "BACKFILL_STALE"
    http_status = 409


class UnresolvedCollisions(DomainError):
    """The backfill found hashes shared by several items that no decision resolved."""

    code = "UNRESOLVED_COLLISIONS"
    http_status = 409


class GenerationNotReady(DomainError):
    """Only a ready generation (backfilled, never activated) can be activated."""

    code = "GENERATION_NOT_READY"
    http_status = 409


class GenerationAlreadyActivated(DomainError):
    """An active or retired generation's keys are history: no backfill or collision
    resolution changes them."""

    code = "GENERATION_ALREADY_ACTIVATED"
    http_status = 409


class GenerationNotActive(DomainError):
    """Keys are assigned only in the active generation."""

    code = "GENERATION_NOT_ACTIVE"
    http_status = 409


class HumanApprovalRequired(DomainError):
    """Activating a generation needs a decision by a human, not by a rule."""

    code = "HUMAN_APPROVAL_REQUIRED"
    http_status = 422


class IdentityConflict(DomainError):
    """Another item already holds this identity hash in this generation (INV-02), or
    the item already holds another key in it."""

    code = "IDENTITY_CONFLICT"
    http_status = 409


class StrongIdMismatch(DomainError):
    """The item already carries a different value for this strong-identifier scheme."""

    code = "STRONG_ID_MISMATCH"
    http_status = 409


class CollisionNotFound(DomainError):
    code = "COLLISION_NOT_FOUND"
    http_status = 404


class CollisionAlreadyResolved(DomainError):
    code = "COLLISION_ALREADY_RESOLVED"
    http_status = 409


class InvalidCollisionResolution(DomainError):
    """The chosen holder is not one of the collision's candidate items."""

    code = "INVALID_COLLISION_RESOLUTION"
    http_status = 422


class ItemWasSplit(DomainError):
    """A split item stays as the split left it (INV-08): its successors carry it on, so
    it can be neither changed nor retired."""

    code = "ITEM_WAS_SPLIT"
    http_status = 409


class InvalidClass(DomainError):
    """A class definition without an id, or naming itself as its parent."""

    code = "INVALID_CLASS"
    http_status = 422


class ClassAlreadyDefined(DomainError):
    """The class is already registered in this catalog (classes never change)."""

    code = "CLASS_ALREADY_DEFINED"
    http_status = 409


class ClassReparentRefused(DomainError):
    """A registered class cannot move under another parent: the values of its items
    could lose the definitions they rely on (INV-07)."""

    code = "CLASS_REPARENT_REFUSED"
    http_status = 409


class ParentClassNotFound(DomainError):
    """A class names a parent class this catalog has not registered."""

    code = "PARENT_CLASS_NOT_FOUND"
    http_status = 422


class AttributeDefinitionInvalid(DomainError):
    """An attribute definition with a bad key, label, type, enum values or
    applicability."""

    code = "ATTRIBUTE_DEFINITION_INVALID"
    http_status = 422


class AttributeVersionExists(DomainError):
    """A definition version is defined once; a change is a new version."""

    code = "ATTRIBUTE_VERSION_EXISTS"
    http_status = 409


class AttributeNotFound(DomainError):
    """No such attribute definition version in this catalog."""

    code = "ATTRIBUTE_NOT_FOUND"
    http_status = 404


class AttributeAlreadyPublished(DomainError):
    """Only a draft can be published; a published version never changes."""

    code = "ATTRIBUTE_ALREADY_PUBLISHED"
    http_status = 409


class AttributeNotPublished(DomainError):
    """A value may only reference a published definition version (INV-07)."""

    code = "ATTRIBUTE_NOT_PUBLISHED"
    http_status = 409


class AttributeNotApplicable(DomainError):
    """The definition version applies neither to the item's class nor to any of its
    ancestors (INV-07)."""

    code = "ATTRIBUTE_NOT_APPLICABLE"
    http_status = 409


class AttributeValueInvalid(DomainError):
    """The value does not fit the definition's type (or enum values)."""

    code = "ATTRIBUTE_VALUE_INVALID"
    http_status = 422


class ItemNotActive(DomainError):
    """An attribute value is set only on an active item."""

    code = "ITEM_NOT_ACTIVE"
    http_status = 409


COMMIT_CONSTRAINTS: dict[str, type[DomainError]] = {
    NOT_PUBLISHED: AttributeNotPublished,
    NOT_APPLICABLE: AttributeNotApplicable,
    VALUE_INVALID: AttributeValueInvalid,
}
"""Deferred constraints PostgreSQL checks at COMMIT, by the name it reports, and the
domain error each violation is: the same error the domain's own check raises."""


def commit_violation(exc: psycopg.errors.IntegrityError) -> DomainError | None:
    """The domain error a constraint violation raised at COMMIT stands for, if any."""
    error = COMMIT_CONSTRAINTS.get(exc.diag.constraint_name or "")
    return error(exc.diag.message_primary or str(exc)) if error else None
