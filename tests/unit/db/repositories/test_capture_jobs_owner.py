"""One module owns ``intake_job`` state.

Every transition of a job (intake's pending and enqueued, the sweeper's claim, the
worker's claim, renewal and end of run, the operators' repairs) is a function of
``db/repositories/capture_jobs.py``. Reads every module of the packages (their AST,
through ``tests.unit.table_writes``) and fails, naming the module and line, when any
other module has SQL that inserts, updates or deletes ``intake_job`` rows, or uses
the table's SQLAlchemy object outside its definition. Reads stay free (a receipt
joins its job, the demo counts jobs by status).
"""

from __future__ import annotations

import ast

import pytest

from tests.unit.table_writes import (
    ROOT,
    package_modules,
    relative,
    sql_writes,
    strings,
    table_object_uses,
    write_pattern,
)

TABLE = "intake_job"
OWNER = "db/repositories/capture_jobs.py"
TABLE_MODULE = "db/tables/intake.py"
# Frozen migrations move rows along with the schema (resolver_0005w's downgrade puts
# the worker's states back to 'enqueued'); they run before any process does.
MIGRATIONS = "db/migrations/"


def violations(path: str, source: str) -> list[str]:
    """Every way ``source`` (the module at ``path``) writes ``intake_job`` rows while
    not being allowed to, as ``path:line: what``."""
    tree = ast.parse(source, path)
    writes_allowed = path == OWNER or path.startswith(MIGRATIONS)
    problems = [] if writes_allowed else sql_writes(path, tree, TABLE)
    problems += table_object_uses(path, tree, TABLE, "db.tables.intake", TABLE_MODULE)
    return sorted(set(problems))


def test_only_the_owner_writes_job_state() -> None:
    problems = [
        problem
        for module in package_modules()
        for problem in violations(relative(module), module.read_text())
    ]
    assert problems == [], f"{TABLE} rows are written only through {OWNER}"


def test_the_owner_is_seen_writing() -> None:
    owner = ast.parse((ROOT / OWNER).read_text())
    written = [s for s in strings(owner) if write_pattern(TABLE).search(s)]
    assert len(written) >= 10, "the scan no longer sees the owner's transitions"


@pytest.mark.parametrize(
    "source",
    [
        "conn.execute(\"UPDATE intake_job SET status = 'enqueued' WHERE job_id = %s\")",
        'tx.execute(\n    "INSERT INTO intake_job (job_id, kind)"\n    " VALUES (%s, %s)", (j, k))',
        'q = f"UPDATE {schema}.intake_job SET claim_owner = {owner}"',
        'tx.execute("DELETE FROM " "intake_job WHERE true")',
        'sql = "WITH c AS (UPDATE intake_job j SET runs = runs + 1 RETURNING 1) SELECT 1"',
        "from db.tables.intake import intake_job",
        "stmt = intake.intake_job.update()",
    ],
)
def test_a_write_from_any_other_module_is_named(source: str) -> None:
    [problem] = violations("db/resolver/intake.py", source)
    assert problem.startswith("db/resolver/intake.py:1: ")


@pytest.mark.parametrize(
    "source",
    [
        'tx.execute("SELECT status FROM intake_job WHERE job_id = %s")',
        '"SELECT j.job_id FROM receipt r LEFT JOIN intake_job j ON j.capture_id = r.capture_id"',
        '"UPDATE intake_jobs_archive SET status = 1"',
        '"GRANT SELECT, UPDATE ON intake_job TO gapless_resolver_app"',
        "from db.repositories import capture_jobs",
    ],
)
def test_reads_grants_and_other_tables_are_not_writes(source: str) -> None:
    assert violations("producers/capture/intake/captures.py", source) == []


def test_the_owner_and_the_migrations_may_write() -> None:
    write = "tx.execute(\"UPDATE intake_job SET status = 'done'\")"
    assert violations(OWNER, write) == []
    assert violations("db/migrations/resolver/versions/resolver_0099_x.py", write) == []
