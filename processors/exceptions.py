"""Errors of the product side's dealings with the resolver; one class per stable code.
(The applier's own are in ``processors.applier.exceptions``.)

Every answer of the resolver's API other than a success becomes one of these
(``processors.resolver_client.refusal``), so no HTTP library error ever reaches a
caller: ``ResolverUnavailable`` when trying again later can help (no answer, a 5xx,
a 429), a ``ResolverRefused`` (or one of its narrower kinds) when the resolver
answered and said no. A refusal carries the resolver's own code and HTTP status
beside its message, so callers branch on types and operators read the resolver's
words.
"""

from __future__ import annotations

from typing import Any

from schemas.errors import GaplessError


class ResolverUnavailable(GaplessError):
    """The resolver did not answer, or answered 5xx; try again later."""

    code = "RESOLVER_UNAVAILABLE"


class ResolverRefused(GaplessError):
    """The resolver answered a request with an error status: trying the same request
    again gives the same answer until something changes. ``resolver_code`` is the
    code of the resolver's error body (``HTTP_<status>`` when it had none)."""

    code = "RESOLVER_REFUSED"

    def __init__(self, resolver_code: str, status: int, message: str) -> None:
        super().__init__(message)
        self.resolver_code = resolver_code
        self.status = status

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.resolver_code, self.status, self.message))

    def __str__(self) -> str:
        return f"{self.resolver_code} ({self.status}): {self.message}"


class RetainedEventsGone(ResolverRefused):
    """410 from the retained-events API (the resolver's ``CURSOR_PRUNED``, a lease
    expired or released, or an epoch no longer current): the events after this
    position are no longer guaranteed; a rebuild is needed."""

    code = "RETAINED_EVENTS_GONE"


class ResolverForgot(ResolverRefused):
    """404 ``LEASE_NOT_FOUND`` or ``EXPORT_NOT_FOUND``: the resolver no longer knows a
    lease or an export this side recorded (its database was restored from before
    they were made). What was built on it has to start over."""

    code = "RESOLVER_FORGOT"


class RebuildRequired(ResolverRefused):
    """The resolver refused this consumer's first progress report on a stream
    (``CONSUMER_NEEDS_REBUILD``): events it has not applied are pruned, so only a
    rebuild brings the stream's projections back."""

    code = "REBUILD_REQUIRED"


class ResolverHistoryBehind(ResolverRefused):
    """409 ``POSITION_BEYOND_COMMITTED``: this side holds a position of a stream the
    resolver has not committed. The resolver's history went back under what was
    applied (a restore, or a promoted replica), so that epoch's history is no longer
    the one this side holds: the catalog's epoch wants fencing."""

    code = "RESOLVER_HISTORY_BEHIND"
