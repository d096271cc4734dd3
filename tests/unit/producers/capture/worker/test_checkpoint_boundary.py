"""One module owns checkpoint writes.

Reads every module of the packages (their AST, not their behaviour) and fails, naming
the module and line, when anything other than the owner writes ``capture_checkpoint``
rows: SQL text with a write verb on the table, the table's SQLAlchemy object used
outside its definition, or the owner's SQL module imported by anything but
``producers.capture.worker.checkpoints``. What it cannot see: a table name assembled at run
time from pieces; keep SQL literal, as the project does everywhere.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[5]
PACKAGES = ("schemas", "db", "producers", "processors", "infra")
TABLE = "capture_checkpoint"
OWNER_SQL = "db/repositories/capture_checkpoints.py"
OWNER = "producers/capture/worker/checkpoints.py"
OWNER_SQL_MODULE = "db.repositories.capture_checkpoints"
TABLE_MODULE = "db/tables/capture_work.py"

_WRITE = re.compile(
    r"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM|TRUNCATE(?:\s+TABLE)?|MERGE\s+INTO|COPY)"
    rf"\s+(?:ONLY\s+)?(?:\"?\w*\"?\s*\.)?\"?{TABLE}\b",
    re.IGNORECASE,
)


def _strings(node: ast.AST) -> list[str]:
    """String literals under ``node``: plain constants, and each f-string's literal
    parts joined (what is interpolated becomes a space)."""
    found: list[str] = []
    for n in ast.walk(node):
        if isinstance(n, ast.JoinedStr):
            found.append(
                "".join(
                    v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else " "
                    for v in n.values
                )
            )
        elif isinstance(n, ast.Constant) and isinstance(n.value, str):
            found.append(n.value)
    return found


def violations(path: str, source: str) -> list[str]:
    """Every way ``source`` (the module at ``path``) writes checkpoint rows while not
    being allowed to, as ``path:line: what``."""
    tree = ast.parse(source, path)
    problems: list[str] = []
    if path != OWNER_SQL:
        # Statements split over several literals of one expression are read joined.
        for node in ast.walk(tree):
            if isinstance(node, ast.Call | ast.BinOp | ast.Assign):
                text = " ".join(_strings(node))
                if _WRITE.search(text):
                    problems.append(f"{path}:{node.lineno}: SQL writing {TABLE}")
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = {a.name for a in node.names}
            if path != TABLE_MODULE and node.module == "db.tables.capture_work" and TABLE in names:
                problems.append(f"{path}:{node.lineno}: imports the {TABLE} table object")
            imports_owner = node.module == OWNER_SQL_MODULE or (
                node.module == "db.repositories" and "capture_checkpoints" in names
            )
            if imports_owner and path != OWNER:
                problems.append(f"{path}:{node.lineno}: imports {OWNER_SQL_MODULE}")
        elif isinstance(node, ast.Import):
            if any(a.name == OWNER_SQL_MODULE for a in node.names) and path != OWNER:
                problems.append(f"{path}:{node.lineno}: imports {OWNER_SQL_MODULE}")
        elif isinstance(node, ast.Attribute) and node.attr == TABLE and path != TABLE_MODULE:
            problems.append(f"{path}:{node.lineno}: uses the {TABLE} table object")
    return sorted(set(problems))


def _modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def test_only_the_owner_writes_checkpoint_rows() -> None:
    problems = [
        problem
        for module in _modules()
        for problem in violations(str(module.relative_to(ROOT)), module.read_text())
    ]
    assert problems == [], "checkpoint rows are written only through " + OWNER


def test_the_owner_exists_and_is_seen_writing() -> None:
    owner = (ROOT / OWNER_SQL).read_text()
    assert _WRITE.search(" ".join(_strings(ast.parse(owner)))), "the scan no longer sees the owner"
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
