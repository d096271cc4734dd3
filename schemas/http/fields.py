"""Field types of request bodies and query parameters that routes of both APIs share."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator, AwareDatetime


def _in_utc(value: datetime) -> datetime:
    # An offset can carry a valid ISO 8601 time past year 1 or 9999 once it is in UTC
    # (0001-01-01T00:00:00+14:00); Python and PostgreSQL cannot hold it there.
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError("the time falls outside years 1 to 9999 in UTC") from None


UtcDatetime = Annotated[AwareDatetime, AfterValidator(_in_utc)]
"""A time with a UTC offset, kept in UTC; outside years 1-9999 in UTC it is refused
(422 ``VALIDATION_FAILED`` naming the field) rather than failing later."""
