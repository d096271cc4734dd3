"""The Alembic migrations produce exactly the tables SQLAlchemy Core defines."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import MetaData, create_engine

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
