"""The house stays livable: no module of the packages over 500 lines and no function
over 80, so a reader can hold a module and a function in mind.

Released migrations are left out: they are frozen history (an ``upgrade`` is one
script of DDL, and editing a released one is refused by review, not by this test).
"""

from __future__ import annotations

import ast

from tests.unit.table_writes import package_modules, parse, relative

MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def _checked() -> list[tuple[str, str]]:
    return [
        (relative(p), p.read_text()) for p in package_modules() if "/migrations/" not in relative(p)
    ]


def test_no_module_is_over_500_lines() -> None:
    long = sorted(
        f"{path} ({len(text.splitlines())})"
        for path, text in _checked()
        if len(text.splitlines()) > MAX_MODULE_LINES
    )
    assert long == [], f"split these along their seams: {long}"


def test_no_function_is_over_80_lines() -> None:
    long = []
    for path, text in _checked():
        for node in ast.walk(parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path}:{node.lineno} {node.name} ({lines})")
    assert sorted(long) == [], f"name the steps of these: {sorted(long)}"
