"""Snapshot exports for shadow rebuilds: the accepted state at one committed position."""
