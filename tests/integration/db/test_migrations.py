"""The Alembic migrations produce exactly the tables SQLAlchemy Core defines."""

from __future__ import annotations

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import CheckConstraint, MetaData, create_engine

from db.migrate import dsn_for, sqlalchemy_url
from db.settings import DatabaseSettings
from db.tables import Database, metadata_of

METADATA: dict[Database, MetaData] = {
    name: metadata_of(name) for name in ("resolver", "product", "control")
}


@pytest.mark.parametrize("database", sorted(METADATA))
def test_migrated_schema_matches_table_definitions(
    db_settings: DatabaseSettings, database: Database
) -> None:
    engine = create_engine(sqlalchemy_url(dsn_for(database, db_settings)))
    with engine.connect() as conn:
        differences = compare_metadata(MigrationContext.configure(conn), METADATA[database])
    engine.dispose()
    assert differences == [], f"write a migration for: {differences}"


@pytest.mark.parametrize("database", sorted(METADATA))
def test_migrated_check_constraints_carry_the_tables_names(
    db_settings: DatabaseSettings, database: Database
) -> None:
    """Alembic's comparison leaves CHECK constraints out; a rename (such as the capture
    job's lease becoming a claim) must reach them too."""
    metadata = METADATA[database]
    declared = {
        (table.name, str(constraint.name))
        for table in metadata.tables.values()
        for constraint in table.constraints
        if isinstance(constraint, CheckConstraint)
    }
    with psycopg.connect(dsn_for(database, db_settings)) as conn:
        rows = conn.execute(
            "SELECT conrelid::regclass::text, conname FROM pg_constraint"
            " WHERE contype = 'c' AND connamespace = 'public'::regnamespace"
        ).fetchall()
    migrated = {(table, name) for table, name in rows if table in metadata.tables}
    assert declared, "the tables declare check constraints"
    assert migrated == declared
