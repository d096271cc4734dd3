"""The last revision of each aggregate in a batch: what a projection row keeps."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from schemas.events import Envelope, aggregate_key
from schemas.ids import AggregateKey

P = TypeVar("P")


def latest_of(
    events: Iterable[Envelope], payload_type: type[P]
) -> dict[AggregateKey, tuple[Envelope, P]]:
    """Each aggregate's highest revision among ``events`` whose payload is a
    ``payload_type``, with that payload. A batch may apply several revisions of one
    aggregate (and a redelivery may repeat one); its row needs only the last."""
    found: dict[AggregateKey, tuple[Envelope, P]] = {}
    for event in events:
        payload = event.payload
        if not isinstance(payload, payload_type):
            continue
        key = aggregate_key(event)
        previous = found.get(key)
        if previous is None or previous[0].aggregate.revision < event.aggregate.revision:
            found[key] = (event, payload)
    return found
