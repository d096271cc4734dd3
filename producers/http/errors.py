"""HTTP errors of the resolver API: every error body is ``{"code", "message"}`` with
a stable, machine-readable code, whatever raised it."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger(__name__)


class ErrorBody(BaseModel):
    code: str
    message: str


class ApiError(Exception):
    """An error raised by the HTTP layer itself (authentication, request limits)."""

    code = "API_ERROR"
    http_status = 400

    def __init__(self, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.headers = dict(headers or {})


# Codes for the errors Starlette raises on its own (unknown route, wrong method…).
_STATUS_CODES = {
    400: "BAD_REQUEST",
    401: "UNAUTHENTICATED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    409: "CONFLICT",
    410: "GONE",
    413: "PAYLOAD_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
    422: "VALIDATION_FAILED",
    503: "UNAVAILABLE",
}


def error_response(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        ErrorBody(code=code, message=message).model_dump(), status_code=status, headers=headers
    )


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI entries for a route's error answers, all of them ``ErrorBody``."""
    return {
        status: {"model": ErrorBody, "description": HTTPStatus(status).phrase}
        for status in statuses
    }


async def _coded(_request: Request, exc: Exception) -> JSONResponse:
    # Domain and API errors alike carry ``code``, ``http_status`` and ``message``.
    return error_response(
        int(getattr(exc, "http_status", 400)),
        str(getattr(exc, "code", "BAD_REQUEST")),
        str(getattr(exc, "message", exc)),
        getattr(exc, "headers", None),
    )


async def _http(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    return error_response(
        exc.status_code,
        _STATUS_CODES.get(exc.status_code, f"HTTP_{exc.status_code}"),
        str(exc.detail),
        exc.headers,
    )


async def _validation(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    problems = [
        f"{'.'.join(str(part) for part in error['loc'])}: {error['msg']}" for error in exc.errors()
    ]
    return error_response(422, "VALIDATION_FAILED", "; ".join(problems) or "invalid request")


async def _bad_value(_request: Request, exc: Exception) -> JSONResponse:
    # PostgreSQL refused a value the request carried (SQLSTATE class 22: a NUL
    # character in text, a number out of range…). The statement never ran and the
    # Unit of Work rolled back, so nothing changed: the caller's input is at fault.
    log.info("refused a value: %s", exc)
    return error_response(
        422, "VALIDATION_FAILED", f"a value cannot be stored: {str(exc).splitlines()[0]}"
    )


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(500, "INTERNAL_ERROR", "internal error; see the server log")


def install_error_handlers(
    app: FastAPI,
    coded: tuple[type[Exception], ...] = (),
    unavailable: tuple[type[Exception], ...] = (),
) -> None:
    """Answer every error as ``ErrorBody``: ``coded`` exception classes with their own
    code and status, ``unavailable`` ones (a database down) as 503 ``UNAVAILABLE``."""
    coded_classes: tuple[type[Exception], ...] = (ApiError, *coded)
    for coded_class in coded_classes:
        app.add_exception_handler(coded_class, _coded)

    async def _unavailable(_request: Request, exc: Exception) -> JSONResponse:
        log.warning("unavailable: %s", exc)
        return error_response(503, "UNAVAILABLE", "a backing service is unavailable; retry")

    for cls in unavailable:
        app.add_exception_handler(cls, _unavailable)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(psycopg.DataError, _bad_value)
    app.add_exception_handler(Exception, _unexpected)
