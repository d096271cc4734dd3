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


# --- identity generations and keys (INV-02) -----------------------------------------


class InvalidIdentity(DomainError):
    """A malformed identity rule (no fields, blank or repeated names), identity hash
    (not 64 lowercase hex digits) or key assignment (the item's class differs)."""

    code = "INVALID_IDENTITY"
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
