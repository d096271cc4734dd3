"""Fixtures of the rebuild tests."""

from tests.integration.processors.rebuild.two_workers import two

__all__ = ["two"]
