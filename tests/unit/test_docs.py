"""What the README and ``docs/`` name exists: every repository path, every module of
the packages (``db.resolver.outbox``, ``processors.applier.batch.Applier``), every
``gapless`` command with its options, every ``make`` target and every ``GAPLESS_``
variable.

Names are read from the Markdown's inline code spans (and, for commands, from its
fenced shell blocks). A name the docs mean as an example of something that does not
exist is written outside code.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from infra.cli.main import main
from tests.unit.schemas.test_settings import READ_ELSEWHERE, in_source, read_by_settings
from tests.unit.table_writes import ROOT

DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
PACKAGES = ("schemas", "db", "producers", "processors", "infra", "tests")
TOP_LEVEL = (*PACKAGES, "docs", ".ci")

CODE_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
FENCE = re.compile(r"^```(?:sh|bash|shell|console)?\n(.*?)^```", re.MULTILINE | re.DOTALL)
VARIABLE = re.compile(r"\bGAPLESS_[A-Z0-9_]*[A-Z0-9]\b")
PATH = re.compile(r"^\.?[\w.-]+(?:/[\w.*-]+)*/?$")
PLACEHOLDER = re.compile(r"<[^>]*>|\.\.\.|…|[A-Z][A-Z0-9_|\\]*|")
DOTTED = re.compile(rf"^(?:{'|'.join(PACKAGES)})(?:\.\w+)+$")


def _spans(doc: Path) -> list[str]:
    text = FENCE.sub("", doc.read_text())
    return [m.group(1).strip() for m in CODE_SPAN.finditer(text)]


def _commands(doc: Path) -> list[str]:
    found = [s for s in _spans(doc) if s.startswith("gapless ")]
    for block in FENCE.findall(doc.read_text()):
        for line in block.splitlines():
            line = line.split(" #", 1)[0].strip().removeprefix("$ ")
            for part in re.split(r"\s*(?:&&|\|\||;|\|)\s*", line):
                words = part.split()
                while words and "=" in words[0]:  # GAPLESS_X=1 gapless ...
                    words.pop(0)
                if words[:1] == [".venv/bin/gapless"]:
                    words[0] = "gapless"
                if words[:1] == ["gapless"]:
                    found.append(" ".join(words))
    return found


def _module_exists(dotted: str) -> bool:
    """The longest prefix of ``dotted`` that is a module or package of the repo; the
    rest are its attributes (not checked: the module is where a reader goes)."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:end])
        if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
            return end >= 2 or parts[0] in PACKAGES
    return False


def _path_exists(name: str) -> bool:
    name = name.rstrip("/")
    if "*" in name:
        return any(ROOT.glob(name))
    if ":" in name:  # path:line or path::test
        name = name.split(":", 1)[0]
    return (ROOT / name).exists()


def _is_path(span: str) -> bool:
    if " " in span or not PATH.match(span):
        return False
    first = span.split("/", 1)[0]
    return ("/" in span and first in TOP_LEVEL) or span in ("Makefile", "README.md")


def _check_command(words: list[str]) -> str | None:
    """Why ``gapless <words>`` names no command or option; ``None`` if it does. A word
    ``a/b`` where a command goes names two (``quarantine retry/skip``)."""
    command: click.Command = main
    args = list(words)
    while args and isinstance(command, click.Group):
        first, *others = args[0].split("/")
        nxt = command.commands.get(first)
        if nxt is None:
            break
        for other in others:
            if other not in command.commands:
                return f"no command {other!r} under {command.name!r}"
        command = nxt
        args.pop(0)
    if isinstance(command, click.Group) and args and not args[0].startswith("-"):
        return f"no command {args[0]!r} under {command.name!r}"
    options = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
    options |= {"-h", "--help"}
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag.startswith("-") and flag not in options and not re.fullmatch(r"-\d.*", flag):
            return f"{command.name!r} has no option {flag}"
    return None


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_path_and_module_the_docs_name_exists(doc: Path) -> None:
    missing = []
    for span in _spans(doc):
        for token in re.split(r"[\s,()]+", span):
            token = token.strip(".;:'\"")
            if not token:
                continue
            is_path, is_module = _is_path(token), bool(DOTTED.match(token))
            if (is_path and not _path_exists(token)) or (is_module and not _module_exists(token)):
                missing.append(token)
    assert missing == [], f"{doc.name} names what does not exist: {sorted(set(missing))}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_gapless_command_the_docs_name_exists(doc: Path) -> None:
    wrong = []
    for line in _commands(doc):
        try:
            words = shlex.split(line)[1:]
        except ValueError:
            words = line.split()[1:]
        words = [w.strip("[]") for w in words if not PLACEHOLDER.fullmatch(w.strip("[]"))]
        why = _check_command(words)
        if why is not None:
            wrong.append(f"`{line}`: {why}")
    assert wrong == [], f"{doc.name}: " + "; ".join(wrong)


def test_every_make_target_the_docs_name_exists() -> None:
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([\w.-]+):", makefile, re.MULTILINE))
    named = {
        m.group(1)
        for doc in DOCS
        for span in _spans(doc)
        if (m := re.fullmatch(r"make ([\w.-]+)", span))
    }
    assert named - targets == set()


def test_every_variable_the_docs_name_is_read() -> None:
    in_tests = {v for p in (ROOT / "tests").rglob("*.py") for v in VARIABLE.findall(p.read_text())}
    read = set(read_by_settings()) | READ_ELSEWHERE | in_source() | in_tests
    named = {(doc.name, v) for doc in DOCS for v in VARIABLE.findall(doc.read_text())}
    assert sorted(n for n in named if n[1] not in read) == []


def test_the_committed_picture_is_rendered_from_its_source() -> None:
    """Graphviz titles each node and edge of the SVG with its ids: those of the source
    and of the image are the same (``make docs-picture`` renders it again)."""
    source = (ROOT / "docs" / "architecture.dot").read_text()
    source = re.sub(r"//[^\n]*|\[[^\]]*\]", "", source)
    nodes = set(re.findall(r"^\s*(\w+)\s*;", source, re.MULTILINE)) - {"graph", "node", "edge"}
    edges = set(re.findall(r"^\s*(\w+)\s*->\s*(\w+)\s*;", source, re.MULTILINE))
    image = (ROOT / "docs" / "architecture.svg").read_text()
    titles = set(re.findall(r"<title>([^<]*)</title>", image))
    assert nodes and edges
    drawn_edges = {tuple(t.split("&#45;&gt;")) for t in titles if "&#45;&gt;" in t}
    assert (nodes | {n for e in edges for n in e}) == titles - {"gapless"} - {
        t for t in titles if "&#45;&gt;" in t
    }
    assert drawn_edges == edges
