"""Fixtures of the campaign's integration tests: the two-worker rebuild rig."""

from tests.integration.processors.rebuild.two_workers import two

__all__ = ["two"]
