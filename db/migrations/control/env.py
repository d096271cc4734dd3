"""Alembic environment for the control database (run through ``db.migrate``)."""

from db.migrate import run_environment

run_environment("control")
