"""Reads of identity generations for the operator API, each in one REPEATABLE READ,
READ ONLY transaction (a generation, its counts and its collisions from one
snapshot; no lock a writer would wait for)."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from db.repositories import identity as repo
from db.repositories.identity import CollisionRow, GenerationKey, GenerationRow
from db.unit_of_work import Transaction
from producers.resolver.exceptions import GenerationNotFound
from producers.resolver.identity.generations import generation_name
from producers.resolver.snapshot import snapshot


@dataclass(frozen=True, slots=True)
class GenerationState:
    row: GenerationRow
    key_count: int
    unresolved_collisions: int


@dataclass(frozen=True, slots=True)
class GenerationWithCollisions:
    state: GenerationState
    collisions: list[CollisionRow]


def _state(tx: Transaction, row: GenerationRow) -> GenerationState:
    return GenerationState(
        row, repo.key_count(tx, row.key), repo.unresolved_collision_count(tx, row.key)
    )


def generation_state(conn: psycopg.Connection, key: GenerationKey) -> GenerationState:
    with snapshot(conn) as tx:
        row = repo.get_generation(tx, key)
        if row is None:
            raise GenerationNotFound(f"no {generation_name(key)}")
        return _state(tx, row)


def read_generation(conn: psycopg.Connection, key: GenerationKey) -> GenerationWithCollisions:
    with snapshot(conn) as tx:
        row = repo.get_generation(tx, key)
        if row is None:
            raise GenerationNotFound(f"no {generation_name(key)}")
        return GenerationWithCollisions(_state(tx, row), repo.collisions(tx, key))


def list_generations(
    conn: psycopg.Connection, tenant_id: str, catalog_id: str, class_id: str | None
) -> list[GenerationState]:
    with snapshot(conn) as tx:
        rows = repo.list_generations(tx, tenant_id, catalog_id, class_id)
        return [_state(tx, row) for row in rows]
