"""HTTP errors of both APIs: every error body is ``{"code", "message"}`` with a
stable, machine-readable code, whatever raised it."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from schemas.errors import GaplessError

log = logging.getLogger(__name__)


class ErrorBody(BaseModel):
    code: str
    message: str


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


async def _coded(request: Request, exc: Exception) -> JSONResponse:
    # Every error raised on purpose carries its code, status and message; one that
    # has no HTTP status was never meant to reach a client and is a bug here.
    assert isinstance(exc, GaplessError)
    if exc.http_status is None:
        return await _unexpected(request, exc)
    return error_response(exc.http_status, exc.code, exc.message, exc.headers)


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
    # The database refused a value the request carried (PostgreSQL's SQLSTATE class
    # 22: a NUL character in text, a number out of range…). The statement never ran
    # and its transaction rolled back, so nothing changed: the caller's input is at
    # fault.
    log.info("refused a value: %s", exc)
    return error_response(
        422, "VALIDATION_FAILED", f"a value cannot be stored: {str(exc).splitlines()[0]}"
    )


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(500, "INTERNAL_ERROR", "internal error; see the server log")


def install_error_handlers(
    app: FastAPI,
    unavailable: tuple[type[Exception], ...] = (),
    bad_values: tuple[type[Exception], ...] = (),
) -> None:
    """Answer every error as ``ErrorBody``: a ``GaplessError`` with its own code and
    status, ``unavailable`` ones (a database down) as 503 ``UNAVAILABLE``,
    ``bad_values`` (a value the database refused, ``psycopg.DataError``) as 422
    ``VALIDATION_FAILED``. The caller names the driver's classes: this layer knows
    no database driver."""
    app.add_exception_handler(GaplessError, _coded)

    async def _unavailable(_request: Request, exc: Exception) -> JSONResponse:
        log.warning("unavailable: %s", exc)
        return error_response(503, "UNAVAILABLE", "a backing service is unavailable; retry")

    for cls in unavailable:
        app.add_exception_handler(cls, _unavailable)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(RequestValidationError, _validation)
    for cls in bad_values:
        app.add_exception_handler(cls, _bad_value)
    app.add_exception_handler(Exception, _unexpected)
