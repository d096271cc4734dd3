"""Errors of the read API, each with its stable code and HTTP status."""

from __future__ import annotations

from schemas.errors import GaplessError


class ServingError(GaplessError):
    code = "SERVING_ERROR"
    http_status = 400


class CatalogNotServed(ServingError):
    """No generation serves the catalog: it has no current history epoch, or the live
    consumer has no progress row in that epoch yet (nothing of it was applied)."""

    code = "CATALOG_NOT_SERVED"
    http_status = 404


class ProductItemNotFound(ServingError):
    """The serving generation has no such item."""

    code = "PRODUCT_ITEM_NOT_FOUND"
    http_status = 404


class CursorInvalid(ServingError):
    """A ``cursor`` this API did not issue, or issued for another listing or query."""

    code = "CURSOR_INVALID"
    http_status = 400


class CatalogBeingRestored(ServingError):
    """The catalog is paused while its history is restored and its projections are
    rebuilt: nothing of it is served until the resume (``Retry-After``)."""

    code = "STREAM_BEING_RESTORED"
    http_status = 503
