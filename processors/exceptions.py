"""Errors of the product side's dealings with the resolver; one class per stable code.
(The applier's own are in ``processors.applier.exceptions``.)"""

from __future__ import annotations

from schemas.errors import GaplessError


class ResolverUnavailable(GaplessError):
    """The resolver did not answer, or answered 5xx; try again later."""

    code = "RESOLVER_UNAVAILABLE"


class RetainedEventsGone(GaplessError):
    """410 from the retained-events API (the resolver's ``CURSOR_PRUNED``, a lease
    expired or released, or an epoch no longer current): the events after this
    position are no longer guaranteed; a rebuild is needed."""

    code = "RETAINED_EVENTS_GONE"


class RebuildRequired(GaplessError):
    """The resolver refused this consumer's first progress report on a stream
    (``CONSUMER_NEEDS_REBUILD``): events it has not applied are pruned, so only a
    rebuild brings the stream's projections back."""

    code = "REBUILD_REQUIRED"
