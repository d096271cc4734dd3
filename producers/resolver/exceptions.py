"""Typed errors of the resolver domain; ``code`` is stable and machine-readable."""

from __future__ import annotations


class DomainError(Exception):
    code = "DOMAIN_ERROR"
    http_status = 422

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ItemNotFound(DomainError):
    code = "ITEM_NOT_FOUND"
    http_status = 404


class ParentNotActive(DomainError):
    """The item an item depends on does not exist or is not active."""

    code = "PARENT_NOT_ACTIVE"
    http_status = 409
