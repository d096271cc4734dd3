"""Reading the packages' source for writes of one table: the helper behind the tests
that hold a table to its one owner module (``capture_checkpoint``, ``intake_job``).

It reads each module's AST, never imports it: SQL text with a write verb on the
table (string literals of one expression read joined, f-strings with what is
interpolated read as a space), and the table's SQLAlchemy object used outside the
module that defines it. What it cannot see: a table name assembled at run time from
pieces; keep SQL literal, as the project does everywhere.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("schemas", "db", "producers", "processors", "infra")


def write_pattern(table: str) -> re.Pattern[str]:
    """SQL that writes ``table`` (optionally schema-qualified or quoted)."""
    return re.compile(
        r"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM|TRUNCATE(?:\s+TABLE)?|MERGE\s+INTO|COPY)"
        rf"\s+(?:ONLY\s+)?(?:\"?\w*\"?\s*\.)?\"?{table}\b",
        re.IGNORECASE,
    )


def strings(node: ast.AST) -> list[str]:
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


def sql_writes(path: str, tree: ast.AST, table: str) -> list[str]:
    """Every statement in ``tree`` whose SQL text writes ``table``, as ``path:line: …``."""
    pattern = write_pattern(table)
    return [
        f"{path}:{node.lineno}: SQL writing {table}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call | ast.BinOp | ast.Assign)
        and pattern.search(" ".join(strings(node)))
    ]


def table_object_uses(
    path: str, tree: ast.AST, table: str, table_module: str, defined_in: str
) -> list[str]:
    """Imports and attribute uses of the table's SQLAlchemy object (``table`` in
    ``table_module``), unless ``path`` is ``defined_in``, the file defining it."""
    if path == defined_in:
        return []
    problems: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == table_module:
            if table in {a.name for a in node.names}:
                problems.append(f"{path}:{node.lineno}: imports the {table} table object")
        elif isinstance(node, ast.Attribute) and node.attr == table:
            problems.append(f"{path}:{node.lineno}: uses the {table} table object")
    return problems


def package_modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse``, tried again when CPython 3.11 raises its spurious
    ``SystemError: AST constructor recursion depth mismatch``: its AST conversion
    keeps one recursion counter for every thread (CPython issue 106905, fixed in
    later releases), so a background thread of another test parsing at the same
    moment can trip it. A second parse of the same source is the real answer."""
    for attempt in range(3):
        try:
            return ast.parse(source, filename)
        except SystemError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")
