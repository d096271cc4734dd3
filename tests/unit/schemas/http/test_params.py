"""Path parameters have one home: only ``schemas/http/params.py`` builds FastAPI's
``Path(...)``; every route of both APIs takes its path parameters from there."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
HOME = ROOT / "schemas" / "http" / "params.py"


def path_calls(source: str) -> int:
    """How many times ``source`` calls FastAPI's ``Path`` (imported by name, or as
    ``fastapi.Path``)."""
    tree = ast.parse(source)
    names = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "fastapi"
        for alias in node.names
        if alias.name == "Path"
    }
    return sum(
        1
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Name) and node.func.id in names)
            or (
                isinstance(node.func, ast.Attribute)
                and node.func.attr == "Path"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "fastapi"
            )
        )
    )


def test_only_the_params_module_builds_path_parameters() -> None:
    elsewhere = sorted(
        str(path.relative_to(ROOT))
        for package in ("schemas", "producers", "processors")
        for path in (ROOT / package).rglob("*.py")
        if path != HOME and path_calls(path.read_text())
    )
    assert elsewhere == []


def test_the_check_sees_path_calls() -> None:
    assert path_calls(HOME.read_text()) > 10
    assert path_calls("import fastapi\nX = fastapi.Path(ge=1)\n") == 1
    assert path_calls("from fastapi import Path as P\nX = P(ge=1)\n") == 1
    assert path_calls("from pathlib import Path\nX = Path('a')\n") == 0
