"""The product side's client of the resolver's retention API (HTTP, bearer token).

Every call is bounded: a timeout per attempt, a bounded number of attempts with
exponential backoff and full jitter (only where trying again can help: no answer, a
5xx or a 429), and at most ``max_concurrency`` calls in flight from one process, so a
resolver that is down or slow is neither hammered nor waited on for ever. A call
that runs out of attempts raises ``ResolverUnavailable``; its callers (progress
reports, gap closing) try again on their next pass, and lose nothing meanwhile: a
report not made only retains more, a gap not closed stays open.
"""

from __future__ import annotations

import base64
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from processors.applier.progress import Stream
from processors.exceptions import RebuildRequired, ResolverUnavailable, RetainedEventsGone


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


def _code(response: httpx.Response) -> str | None:
    try:
        body = response.json()
    except ValueError:
        return None
    return body.get("code") if isinstance(body, dict) else None


def _retryable(response: httpx.Response) -> bool:
    return response.status_code >= 500 or response.status_code == 429


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
        self._slots = threading.BoundedSemaphore(max_concurrency)
        self._sleep = sleep
        self._rng = random.Random()

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """One call, tried up to ``max_attempts`` times; a slot is held only while a
        request is in flight, never while backing off."""
        problem = ""
        for attempt in range(1, self._retry.max_attempts + 1):
            if attempt > 1:
                self._sleep(self._retry.pause(attempt - 1, self._rng))
            try:
                with self._slots:
                    response = self._http.request(method, url, **kwargs)
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
        """Report durable progress; returns what the resolver now holds (never lower)."""
        response = self._call(
            "POST", f"{_path(stream)}/consumers/{consumer}/progress", json={"position": position}
        )
        if response.status_code == 409 and _code(response) == "CONSUMER_NEEDS_REBUILD":
            raise RebuildRequired(response.json().get("message", "needs a rebuild"))
        response.raise_for_status()
        return int(response.json()["reported_position"])

    def streams(self, page_size: int = 1000) -> list[StreamPositions]:
        """Every stream the token may read, with its committed and pruned positions
        (all pages; each page is one bounded call)."""
        found: list[StreamPositions] = []
        params: dict[str, Any] = {"limit": page_size}
        while True:
            response = self._call("GET", "/v1/streams", params=params)
            response.raise_for_status()
            body = response.json()
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
        if response.status_code == 410:
            raise RetainedEventsGone(response.json().get("message", "gone"))
        response.raise_for_status()
        body: dict[str, Any] = response.json()
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
        """410 (``RetainedEventsGone``) once it expired or was released."""
        return self._json(
            self._call("POST", f"/v1/leases/{lease_id}/renew", json={"ttl_seconds": ttl_seconds})
        )

    def release_lease(self, lease_id: str) -> None:
        self._call("DELETE", f"/v1/leases/{lease_id}").raise_for_status()

    def start_export(self, lease_id: str) -> dict[str, Any]:
        return self._json(self._call("POST", "/v1/exports", json={"lease_id": lease_id}))

    def export(self, export_id: str) -> dict[str, Any]:
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
        epoch is no longer current."""
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
        if response.status_code == 410:
            raise RetainedEventsGone(response.json().get("message", "pruned"))
        response.raise_for_status()
        body = response.json()
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
