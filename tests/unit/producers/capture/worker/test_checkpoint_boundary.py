"""One module owns checkpoint writes.

Reads every module of the packages (their AST, not their behaviour) and fails, naming
the module and line, when anything other than the owner writes ``capture_checkpoint``
rows: SQL text with a write verb on the table, the table's SQLAlchemy object used
outside its definition, or the owner's SQL module imported by anything but
``producers.capture.worker.checkpoints``. What it cannot see: a table name assembled at run
time from pieces; keep SQL literal, as the project does everywhere. The reading is
``tests.unit.table_writes``'s, shared with the ``intake_job`` owner test.
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

TABLE = "capture_checkpoint"
OWNER_SQL = "db/repositories/capture_checkpoints.py"
OWNER = "producers/capture/worker/checkpoints.py"
OWNER_SQL_MODULE = "db.repositories.capture_checkpoints"
TABLE_MODULE = "db/tables/capture_work.py"

_WRITE = write_pattern(TABLE)


def violations(path: str, source: str) -> list[str]:
    """Every way ``source`` (the module at ``path``) writes checkpoint rows while not
    being allowed to, as ``path:line: what``."""
    tree = ast.parse(source, path)
    problems = [] if path == OWNER_SQL else sql_writes(path, tree, TABLE)
    problems += table_object_uses(path, tree, TABLE, "db.tables.capture_work", TABLE_MODULE)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = {a.name for a in node.names}
            imports_owner = node.module == OWNER_SQL_MODULE or (
                node.module == "db.repositories" and "capture_checkpoints" in names
            )
            if imports_owner and path != OWNER:
                problems.append(f"{path}:{node.lineno}: imports {OWNER_SQL_MODULE}")
        elif (
            isinstance(node, ast.Import)
            and any(a.name == OWNER_SQL_MODULE for a in node.names)
            and path != OWNER
        ):
            problems.append(f"{path}:{node.lineno}: imports {OWNER_SQL_MODULE}")
    return sorted(set(problems))


def test_only_the_owner_writes_checkpoint_rows() -> None:
    problems = [
        problem
        for module in package_modules()
        for problem in violations(relative(module), module.read_text())
    ]
    assert problems == [], "checkpoint rows are written only through " + OWNER


def test_the_owner_exists_and_is_seen_writing() -> None:
    owner = (ROOT / OWNER_SQL).read_text()
    assert _WRITE.search(" ".join(strings(ast.parse(owner)))), "the scan no longer sees the owner"
    assert OWNER_SQL_MODULE.rsplit(".", 1)[1] in (ROOT / OWNER).read_text()


@pytest.mark.parametrize(
    "source",
    [
        'conn.execute("UPDATE capture_checkpoint SET next_item = 9")',
        'tx.execute(\n    "INSERT INTO capture_checkpoint (job_id)"\n    " VALUES (%s)", (j,))',
        'q = f"UPDATE {schema}.capture_checkpoint SET next_item = {n}"',
        'tx.execute("DELETE FROM " "capture_checkpoint WHERE true")',
        'q = "update  public.\\"capture_checkpoint\\" set items = 0"',
        "from db.tables.capture_work import capture_checkpoint",
        "from db.repositories import capture_checkpoints",
        "import db.repositories.capture_checkpoints",
        "stmt = capture_work.capture_checkpoint.update()",
    ],
)
def test_a_write_from_any_other_module_is_named(source: str) -> None:
    [problem] = violations("producers/capture/worker/pipeline.py", source)
    assert problem.startswith("producers/capture/worker/pipeline.py:")


@pytest.mark.parametrize(
    "source",
    [
        'tx.execute("SELECT next_item FROM capture_checkpoint WHERE job_id = %s")',
        '"UPDATE capture_item SET outcome = %s"',
        '"INSERT INTO capture_checkpoints_archive VALUES (1)"',
    ],
)
def test_reads_and_other_tables_are_not_writes(source: str) -> None:
    assert violations("producers/capture/worker/pipeline.py", source) == []
