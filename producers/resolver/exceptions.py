"""Typed errors of the resolver domain; ``code`` is stable and machine-readable."""

from __future__ import annotations

import psycopg.errors

from db.tables.attributes import NOT_APPLICABLE, NOT_PUBLISHED, VALUE_INVALID


class DomainError(Exception):
    code = "DOMAIN_ERROR"
    http_status = 422

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


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


class EvidenceMissing(DomainError):
    """A decision must rest on at least one evidence reference (capture + locator)."""

    code = "EVIDENCE_MISSING"
    http_status = 422


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
