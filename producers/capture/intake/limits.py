"""A request-body limit for the capture endpoint, enforced before the body is parsed.

The JSON body is read whole before validation, so a limit checked in the route
would come after a too-large body had already been buffered. This ASGI middleware
answers 413 as soon as the declared or received length passes the limit, and 415
for a body that is not JSON, without reading further.
"""

from __future__ import annotations

from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from schemas.http.errors import error_response


class CaptureBodyLimit:
    def __init__(self, app: ASGIApp, path: str, max_bytes: int) -> None:
        self.app = app
        self.path = path
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != self.path:
            await self.app(scope, receive, send)
            return
        headers: dict[bytes, bytes] = dict(scope["headers"])
        media = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
        if media != b"application/json":
            await self._answer(
                scope,
                receive,
                send,
                415,
                "UNSUPPORTED_MEDIA_TYPE",
                "the request body must be application/json",
            )
            return
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._too_large(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._too_large(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._answer(
            scope,
            receive,
            send,
            413,
            "PAYLOAD_TOO_LARGE",
            f"the request body may be at most {self.max_bytes} bytes",
        )

    @staticmethod
    async def _answer(
        scope: Scope, receive: Receive, send: Send, status: int, code: str, message: str
    ) -> None:
        response: Any = error_response(status, code, message, {"Connection": "close"})
        await response(scope, receive, send)


def request_limit(max_artifact_bytes: int) -> int:
    """The body limit for an artifact limit: base64 grows 4/3, plus room for metadata."""
    return (max_artifact_bytes + 2) // 3 * 4 + 64 * 1024
