"""Alembic environment for the product database (run through ``db.migrate``)."""

from db.migrate import run_environment

run_environment("product")
