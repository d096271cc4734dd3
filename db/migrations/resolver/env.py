"""Alembic environment for the resolver database (run through ``db.migrate``)."""

from db.migrate import run_environment

run_environment("resolver")
