"""SQLAlchemy Core definitions of every table, the source of truth for migrations.

Each database has one ``MetaData`` (``resolver``, ``product`` and ``control``); a
table module adds its tables to its database's metadata when imported.
``metadata_of`` imports every module of this package first, so a database's
metadata is complete without a hand-kept list of modules anywhere.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Literal

from sqlalchemy import MetaData

Database = Literal["resolver", "product", "control"]


def metadata_of(database: Database) -> MetaData:
    """The complete metadata of ``database``: every table its modules define."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    owner = importlib.import_module(f"{__name__}.{database}")
    metadata = owner.metadata
    assert isinstance(metadata, MetaData)
    return metadata


def table_names(database: Database) -> list[str]:
    """The names of ``database``'s tables, dependants before what they reference."""
    return [table.name for table in reversed(metadata_of(database).sorted_tables)]
