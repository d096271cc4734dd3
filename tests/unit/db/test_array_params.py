"""Every array a statement takes as a parameter (``%b::text[]``, ``%(ids)b::uuid[]``)
goes in binary.

psycopg sends a list given as ``%s`` through its text array dumper, which quotes and
escapes each element in Python: about 2 µs an element for text, 4 for a uuid and 9
for a timestamp, against 0.2 to 0.5 µs binary. The capture worker's batches pass
such arrays of every product they settle (2026-12-07: a quarter of its CPU was the
dumping of one statement's nine arrays). The guard reads the source (the AST,
nothing imported) for a string holding a ``%s`` or ``%(name)s`` placeholder cast to
an array type. The bench and the migrations are left out: neither is a hot path.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import psycopg.adapt
from psycopg.adapt import PyFormat

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("db", "producers", "processors", "schemas", "infra")
LEFT_OUT = ("infra/bench/", "db/migrations/")
TEXT_ARRAY = re.compile(r"%(?:\(\w+\))?s::\w+\[\]")


def _strings() -> list[tuple[str, int, str]]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if name.startswith(LEFT_OUT):
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    found.append((name, node.lineno, node.value))
    return found


def test_no_array_parameter_goes_as_text() -> None:
    strings = _strings()
    assert any("::text[]" in s for _, _, s in strings), "the guard finds the statements"
    text = [f"{name}:{line}: {m}" for name, line, s in strings for m in TEXT_ARRAY.findall(s)]
    assert text == [], "send these arrays binary (%b / %(name)b):\n" + "\n".join(text)


def test_the_guard_sees_both_placeholder_forms() -> None:
    assert TEXT_ARRAY.findall("unnest(%s::text[], %(ids)s::uuid[], %b::int[], %(x)b::text[])") == [
        "%s::text[]",
        "%(ids)s::uuid[]",
    ]


def test_a_list_given_as_b_is_dumped_by_the_binary_array_dumper() -> None:
    """What the rule relies on: ``%b`` picks psycopg's binary list dumper, and ``%s``
    its text one."""
    transformer = psycopg.adapt.Transformer()
    values = ["a", None, "b"]
    assert type(transformer.get_dumper(values, PyFormat.BINARY)).__name__ == "ListBinaryDumper"
    assert type(transformer.get_dumper(values, PyFormat.AUTO)).__name__ == "ListDumper"
