"""Control commands, carried out once each: a REBUILD becomes a rebuild row (its id is
the command's), a CANCEL stops one; PAUSE and RESUME are every worker's pause
watch's (``db.control.control_listener``), not this module's. ``accept`` is the one place a
command's kind is dispatched on, by an exhaustive match: a new kind is a type error
until it is given its own branch, never taken for another.

One transaction per command. A command delivered twice finds its row and changes
nothing; a REBUILD for a catalog that already has an unfinished rebuild of the same
consumer is answered with that rebuild, not started twice (the unique index on
unfinished rebuilds decides, also between two workers), and that answer is kept
(``control_answer``): the same request delivered again, even after the running
rebuild is done (a rebalance redelivers what was not committed), gets the same
answer and starts nothing. A cancelled rebuild's
shadow generation is never served; the cleanup releases its lease and removes its
rows. A rebuild cutting over can no longer be cancelled (the swap may be committed).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import assert_never

import psycopg
import psycopg.errors

from db.product import rebuilds as sql
from db.product.rebuilds import RebuildRow
from schemas.control import ControlCommand
from schemas.ids import StreamId

CurrentEpoch = Callable[[str, str], int | None]


@dataclass(frozen=True, slots=True)
class Answer:
    """What became of a command: ``started``, ``already_recorded`` (a redelivery),
    ``already_rebuilding`` (``row`` is the unfinished one), ``cancelled``,
    ``finished`` (nothing left to cancel), ``not_found``, ``refused`` (no history
    epoch to rebuild; a cancel naming no rebuild or one cutting over), or
    ``pause_watch`` (a PAUSE or RESUME: nothing to do here)."""

    status: str
    row: RebuildRow | None
    message: str = ""


def shadow_consumer(consumer: str, rebuild_id: uuid.UUID) -> str:
    return f"{consumer}~rebuild-{rebuild_id.hex[:12]}"


def accept(
    product_dsn: str, command: ControlCommand, default_consumer: str, current_epoch: CurrentEpoch
) -> Answer:
    """Carry one command out (the module docstring)."""
    match command.kind:
        case "rebuild":
            with psycopg.connect(product_dsn) as conn:
                return _rebuild(conn, command, command.consumer or default_consumer, current_epoch)
        case "cancel":
            with psycopg.connect(product_dsn) as conn:
                return _cancel(conn, command)
        case "pause" | "resume":
            return Answer("pause_watch", None, "every worker's pause watch carries it out")
        case _:
            assert_never(command.kind)


def _rebuild(
    conn: psycopg.Connection, command: ControlCommand, consumer: str, current_epoch: CurrentEpoch
) -> Answer:
    existing = sql.get(conn, command.command_id)
    if existing is not None:
        return Answer("already_recorded", existing)
    answered = sql.answer_of(conn, command.command_id)
    if answered is not None:  # a redelivery of a request not started: the same answer
        running = (
            sql.get(conn, answered.running_rebuild_id) if answered.running_rebuild_id else None
        )
        return Answer(answered.status, running, answered.message)
    epoch = current_epoch(command.tenant_id, command.catalog_id)
    if epoch is None:
        return _not_started(
            conn,
            command,
            "refused",
            None,
            f"{command.tenant_id}/{command.catalog_id} has no history epoch",
        )
    stream = StreamId(command.tenant_id, command.catalog_id, epoch)
    try:
        with conn.transaction():
            row = sql.insert(
                conn,
                command.command_id,
                consumer,
                stream,
                shadow_consumer(consumer, command.command_id),
                command.requested_by,
                command.reason,
            )
    except psycopg.errors.UniqueViolation:
        active = sql.active_for(conn, consumer, command.tenant_id, command.catalog_id)
        return _not_started(
            conn, command, "already_rebuilding", active, "a rebuild of this catalog is running"
        )
    if row is None:  # recorded by another worker meanwhile
        return Answer("already_recorded", sql.get(conn, command.command_id))
    return Answer("started", row)


def _not_started(
    conn: psycopg.Connection,
    command: ControlCommand,
    status: str,
    running: RebuildRow | None,
    message: str,
) -> Answer:
    """Keep the answer (``control_answer``), so the request delivered again, even
    after the running rebuild is done, is answered the same and starts nothing."""
    with conn.transaction():
        kept = sql.record_answer(
            conn, command.command_id, status, message, running.rebuild_id if running else None
        )
    return Answer(kept.status, running, kept.message)


def _cancel(conn: psycopg.Connection, command: ControlCommand) -> Answer:
    if command.rebuild_id is None:
        return Answer("refused", None, "a CANCEL names the rebuild to stop")
    with conn.transaction():
        row = sql.get(conn, command.rebuild_id, lock=True)
        if row is None:
            return Answer("not_found", None)
        if row.phase in ("done", "failed", "cancelled"):
            return Answer("finished", row)
        if row.phase == "cutting_over":
            return Answer("refused", row, "it is cutting over: too late to cancel")
        cancelled = sql.update(
            conn,
            row.rebuild_id,
            "cancelled",
            error_message=f"cancelled by {command.requested_by}: {command.reason}"[:2000],
        )
    return Answer("cancelled", cancelled)
