"""Typed errors of the resolver domain; ``code`` is stable and machine-readable."""

from __future__ import annotations


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


class ItemWasSplit(DomainError):
    """A split item stays as the split left it (INV-08): its successors carry it on, so
    it can be neither changed nor retired."""

    code = "ITEM_WAS_SPLIT"
    http_status = 409
