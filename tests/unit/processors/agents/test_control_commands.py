"""A control command is recorded before it is acknowledged, whatever the database does.

Found by the fault campaign (``gapless chaos``): a rebuild requested while
PostgreSQL restarted crashed the control agent and was never started (Faust
committed its offset all the same).
"""

from __future__ import annotations

import asyncio

import psycopg

from processors.agents.rebuilds import carry_out


def test_a_command_is_recorded_once_the_database_answers_again() -> None:
    attempts: list[bytes] = []

    def record(value: bytes) -> None:
        attempts.append(value)
        if len(attempts) < 3:
            raise psycopg.OperationalError("connection refused")

    asyncio.run(carry_out(record, b"rebuild", retry_seconds=0.0))
    assert attempts == [b"rebuild"] * 3


def test_other_errors_are_not_swallowed() -> None:
    def record(_value: bytes) -> None:
        raise ValueError("a bug")

    try:
        asyncio.run(carry_out(record, b"rebuild", retry_seconds=0.0))
    except ValueError:
        return
    raise AssertionError("a programming error must surface")
