"""The product side's client of the resolver's retention API (HTTP, bearer token).

Every call is bounded: a timeout per attempt, a bounded number of attempts with
exponential backoff and full jitter (only where trying again can help: no answer, a
5xx or a 429), and at most ``max_concurrency`` calls in flight from one process, so a
resolver that is down or slow is neither hammered nor waited on for ever. A call
that runs out of attempts raises ``ResolverUnavailable``; its callers (progress
reports, gap closing) try again on their next pass, and lose nothing meanwhile: a
report not made only retains more, a gap not closed stays open.

Every other answer that is not a success is mapped by one function, ``refusal``, to a
typed error of ``processors.exceptions``: no ``httpx`` error reaches a caller.
"""

from __future__ import annotations

import base64
import copy
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from processors.applier.progress import Stream
from processors.exceptions import (
    RebuildRequired,
    ResolverForgot,
    ResolverHistoryBehind,
    ResolverRefused,
    ResolverUnavailable,
    RetainedEventsGone,
)


@dataclass(frozen=True, slots=True)
class RetainedEvent:
    position: int
    key: bytes
    value: bytes


@dataclass(frozen=True, slots=True)
class RetainedPage:
    committed_position: int
    pruned_through: int
    events: list[RetainedEvent]


@dataclass(frozen=True, slots=True)
class StreamPositions:
    """A stream as the resolver knows it."""

    stream: Stream
    committed: int
    pruned_through: int


def _path(stream: Stream) -> str:
    tenant, catalog, epoch = stream
    return f"/v1/streams/{tenant}/{catalog}/{epoch}"


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently one call is tried."""

    max_attempts: int = 4
    base_seconds: float = 0.25
    cap_seconds: float = 4.0

    def pause(self, failed_attempts: int, rng: random.Random) -> float:
        """Full jitter: uniform in [0, min(cap, base * 2**(n - 1))]."""
        return rng.uniform(0, min(self.cap_seconds, self.base_seconds * 2 ** (failed_attempts - 1)))


FORGOTTEN = frozenset({"LEASE_NOT_FOUND", "EXPORT_NOT_FOUND"})
"""404 codes saying the resolver no longer knows a lease or an export (``ResolverForgot``)."""

_REFUSALS: dict[str, type[ResolverRefused]] = {
    "CONSUMER_NEEDS_REBUILD": RebuildRequired,
    "POSITION_BEYOND_COMMITTED": ResolverHistoryBehind,
}


def _retryable(response: httpx.Response) -> bool:
    return response.status_code >= 500 or response.status_code == 429


def _body(response: httpx.Response) -> tuple[str | None, str]:
    """The error body's code and message (``{"code", "message"}``), as far as there is one."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return None, response.text[:500] or response.reason_phrase
    code = body.get("code")
    message = body.get("message") or body.get("detail") or response.reason_phrase
    return (code if isinstance(code, str) else None), str(message)


def refusal(response: httpx.Response) -> ResolverRefused | ResolverUnavailable:
    """The typed error for an answer that is not a success (one place decides).

    A 5xx or a 429 is ``ResolverUnavailable`` (later may differ); a 410 is
    ``RetainedEventsGone``; a 404 naming a lease or an export is ``ResolverForgot``;
    a code with a class of its own gets it (``CONSUMER_NEEDS_REBUILD``,
    ``POSITION_BEYOND_COMMITTED``); anything else is a plain ``ResolverRefused``."""
    status = response.status_code
    code, message = _body(response)
    if _retryable(response):
        return ResolverUnavailable(f"{code or f'HTTP {status}'}: {message}")
    resolver_code = code or f"HTTP_{status}"
    kind: type[ResolverRefused] = ResolverRefused
    if status == 410:
        kind = RetainedEventsGone
    elif status == 404 and code in FORGOTTEN:
        kind = ResolverForgot
    elif code in _REFUSALS:
        kind = _REFUSALS[code]
    return kind(resolver_code, status, message)


def _success(response: httpx.Response) -> httpx.Response:
    if not response.is_success:
        raise refusal(response)
    return response


class ResolverClient:
    def __init__(
        self,
        base_url: str,
        token: str | None,
        timeout_s: float = 5.0,
        retry: RetryPolicy | None = None,
        max_concurrency: int = 4,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(
            base_url=base_url, headers=headers, timeout=timeout_s, transport=transport
        )
        self._retry = retry or RetryPolicy()
        self._timeout = timeout_s
        self._slots = threading.BoundedSemaphore(max_concurrency)
        self._sleep = sleep
        self._rng = random.Random()

    def close(self) -> None:
        self._http.close()

    def once(self, timeout_s: float) -> ResolverClient:
        """This client with each call tried once, within ``timeout_s``, and on a slot
        of its own (never queued behind the others' calls): for a caller that holds
        others up while it waits, the cutover pausing a stream's live applier."""
        view = copy.copy(self)
        view._retry = RetryPolicy(max_attempts=1)
        view._timeout = timeout_s
        view._slots = threading.BoundedSemaphore(1)
        return view

    def _call(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """One call, tried up to ``max_attempts`` times; a slot is held only while a
        request is in flight, never while backing off."""
        problem = ""
        for attempt in range(1, self._retry.max_attempts + 1):
            if attempt > 1:
                self._sleep(self._retry.pause(attempt - 1, self._rng))
            try:
                with self._slots:
                    response = self._http.request(method, url, timeout=self._timeout, **kwargs)
            except httpx.HTTPError as exc:
                problem = str(exc) or type(exc).__name__
                continue
            if not _retryable(response):
                return response
            problem = f"HTTP {response.status_code}"
        raise ResolverUnavailable(
            f"{method} {url}: {problem} ({self._retry.max_attempts} attempts)"
        )

    def report_progress(self, stream: Stream, consumer: str, position: int) -> int:
        """Report durable progress; returns what the resolver now holds (never lower).
        ``RebuildRequired`` when it is a first report below pruned-through,
        ``ResolverHistoryBehind`` when ``position`` is above the committed cursor."""
        response = self._call(
            "POST", f"{_path(stream)}/consumers/{consumer}/progress", json={"position": position}
        )
        return int(_success(response).json()["reported_position"])

    def streams(self, page_size: int = 1000) -> list[StreamPositions]:
        """Every stream the token may read, with its committed and pruned positions
        (all pages; each page is one bounded call)."""
        found: list[StreamPositions] = []
        params: dict[str, Any] = {"limit": page_size}
        while True:
            body = _success(self._call("GET", "/v1/streams", params=params)).json()
            for s in body["streams"]:
                stream = (str(s["tenant_id"]), str(s["catalog_id"]), int(s["history_epoch"]))
                found.append(
                    StreamPositions(stream, int(s["committed_position"]), int(s["pruned_through"]))
                )
            if not body["more"] or not body["streams"]:
                return found
            tenant, catalog, epoch = found[-1].stream
            params.update(after_tenant=tenant, after_catalog=catalog, after_epoch=epoch)

    def _json(self, response: httpx.Response) -> dict[str, Any]:
        body: dict[str, Any] = _success(response).json()
        return body

    def create_lease(self, stream: Stream, holder: str, ttl_seconds: int) -> dict[str, Any]:
        """A rebuild lease pinned at the stream's pruned-through position."""
        tenant, catalog, epoch = stream
        return self._json(
            self._call(
                "POST",
                "/v1/leases",
                json={
                    "tenant_id": tenant,
                    "catalog_id": catalog,
                    "history_epoch": epoch,
                    "holder": holder,
                    "ttl_seconds": ttl_seconds,
                },
            )
        )

    def renew_lease(self, lease_id: str, ttl_seconds: int) -> dict[str, Any]:
        """``RetainedEventsGone`` once it expired or was released, ``ResolverForgot``
        once the resolver no longer knows it."""
        return self._json(
            self._call("POST", f"/v1/leases/{lease_id}/renew", json={"ttl_seconds": ttl_seconds})
        )

    def release_lease(self, lease_id: str) -> bool:
        """Release a lease; False when the resolver no longer holds it at all (it
        forgot it, 404 ``LEASE_NOT_FOUND`` after a restore, or answers it is gone,
        410). Either way it pins nothing now, which is all a release is for, so both
        count as done (a released or expired lease the resolver still knows is
        released again: True). Other refusals raise as everywhere."""
        try:
            _success(self._call("DELETE", f"/v1/leases/{lease_id}"))
        except (ResolverForgot, RetainedEventsGone):
            return False
        return True

    def start_export(self, lease_id: str) -> dict[str, Any]:
        return self._json(self._call("POST", "/v1/exports", json={"lease_id": lease_id}))

    def export(self, export_id: str) -> dict[str, Any]:
        """``ResolverForgot`` once the resolver no longer knows the export."""
        return self._json(self._call("GET", f"/v1/exports/{export_id}"))

    def retained_events(self, stream: Stream, after: int, limit: int = 500) -> RetainedPage:
        return self._page(
            self._call("GET", f"{_path(stream)}/events", params={"after": after, "limit": limit})
        )

    def export_events(
        self, lease_id: str, history_epoch: int, after: int, limit: int = 500
    ) -> RetainedPage:
        """A rebuild's catch-up: retained events after ``after`` under its lease; 410
        (``RetainedEventsGone``) once the lease expired, the cursor was pruned or the
        epoch is no longer current, ``ResolverForgot`` once the lease is unknown."""
        return self._page(
            self._call(
                "GET",
                "/v1/exports/events",
                params={
                    "lease_id": lease_id,
                    "history_epoch": history_epoch,
                    "after": after,
                    "limit": limit,
                },
            )
        )

    def _page(self, response: httpx.Response) -> RetainedPage:
        body = _success(response).json()
        return RetainedPage(
            committed_position=int(body["committed_position"]),
            pruned_through=int(body["pruned_through"]),
            events=[
                RetainedEvent(
                    int(e["position"]), base64.b64decode(e["key"]), base64.b64decode(e["value"])
                )
                for e in body["events"]
            ],
        )
