"""The product side's client of the resolver's retention API (HTTP, bearer token)."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import httpx

from processors.applier.progress import Stream
from processors.exceptions import ResolverUnavailable, RetainedEventsGone


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


def _path(stream: Stream) -> str:
    tenant, catalog, epoch = stream
    return f"/v1/streams/{tenant}/{catalog}/{epoch}"


class ResolverClient:
    def __init__(self, base_url: str, token: str | None, timeout_s: float = 5.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=base_url, headers=headers, timeout=timeout_s)

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, url, **kwargs)
        except httpx.HTTPError as exc:
            raise ResolverUnavailable(f"{method} {url}: {exc}") from exc
        if response.status_code >= 500:
            raise ResolverUnavailable(f"{method} {url}: HTTP {response.status_code}")
        return response

    def report_progress(self, stream: Stream, consumer: str, position: int) -> int:
        """Report durable progress; returns what the resolver now holds (never lower)."""
        response = self._call(
            "POST", f"{_path(stream)}/consumers/{consumer}/progress", json={"position": position}
        )
        response.raise_for_status()
        return int(response.json()["reported_position"])

    def retained_events(self, stream: Stream, after: int, limit: int = 500) -> RetainedPage:
        response = self._call(
            "GET", f"{_path(stream)}/events", params={"after": after, "limit": limit}
        )
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
