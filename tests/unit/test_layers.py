"""The import graph keeps the layers: ``schemas`` <- ``db`` <- ``producers`` /
``processors`` <- ``infra``.

Builds the graph of the five packages from their source (the AST, nothing is
imported) and fails naming the modules when imports close a cycle (between modules,
also through an import inside a function, and between packages), when any import
runs up the layers, or when ``producers`` and ``processors`` import each other: they
meet only through Kafka, HTTP and the shared ``schemas``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

from tests.unit.table_writes import parse

ROOT = Path(__file__).resolve().parents[2]
LAYER = {"schemas": 0, "db": 1, "producers": 2, "processors": 2, "infra": 3}
APART = frozenset({"producers", "processors"})

Graph = Mapping[str, Mapping[str, bool]]
"""module -> {imported module: whether the import is at module level}"""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(name: str, source: str, modules: set[str]) -> dict[str, bool]:
    """The project modules ``source`` imports; ``True`` where the import runs at module
    level (not inside a function, where it runs only when called)."""
    tree = parse(source)
    found: dict[str, bool] = {}
    is_package = name + ".__init__" in modules

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = top and not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            targets: list[str] = []
            if isinstance(child, ast.Import):
                targets = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = name.split(".")
                    anchor = anchor if is_package else anchor[:-1]
                    anchor = anchor[: len(anchor) - (child.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                # ``from package import module`` imports the module; else the names'
                # module itself.
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                    for a in child.names
                ]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    found[target] = found.get(target, False) or top
            visit(child, inner)

    visit(tree, True)
    return found


def build_graph(sources: Mapping[str, str]) -> dict[str, dict[str, bool]]:
    known = set(sources) | {f"{m}.__init__" for m in sources if _is_package(m, sources)}
    return {name: imports_of(name, text, known) for name, text in sources.items()}


def _is_package(name: str, sources: Mapping[str, str]) -> bool:
    return any(other.startswith(name + ".") for other in sources)


def cycles(graph: Graph) -> list[list[str]]:
    """Every strongly connected group of modules tied by module-level imports (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target, top in graph.get(node, {}).items():
            if not top:
                continue
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def wrong_way(graph: Graph) -> list[str]:
    """Imports that run up the layers or across between producers and processors."""
    problems = []
    for source, targets in sorted(graph.items()):
        own = source.split(".")[0]
        for target in sorted(targets):
            theirs = target.split(".")[0]
            if own == theirs:
                continue
            if LAYER[theirs] > LAYER[own]:
                problems.append(f"{source} -> {target}: imports up the layers")
            elif {own, theirs} == APART:
                problems.append(
                    f"{source} -> {target}: producers and processors meet only on Kafka"
                )
    return problems


def every_import(graph: Graph) -> dict[str, dict[str, bool]]:
    """The graph with imports inside functions counted as module-level ones."""
    return {source: dict.fromkeys(targets, True) for source, targets in graph.items()}


def package_graph(graph: Graph) -> dict[str, dict[str, bool]]:
    """Packages (folders) and the packages their modules import, every import counted;
    a package and the packages inside it are not told apart from each other's view."""
    packages = {m.rpartition(".")[0] for m in graph} | {
        m for m in graph if any(o.startswith(m + ".") for o in graph)
    }

    def home(module: str) -> str:
        return module if module in packages else module.rpartition(".")[0]

    tied: dict[str, dict[str, bool]] = {}
    for source, targets in graph.items():
        for target in targets:
            a, b = home(source), home(target)
            if a != b and not a.startswith(b + ".") and not b.startswith(a + "."):
                tied.setdefault(a, {})[b] = True
    return tied


def _sources(packages: Iterable[str]) -> dict[str, str]:
    return {
        module_name(path): path.read_text()
        for package in packages
        for path in sorted((ROOT / package).rglob("*.py"))
    }


def test_no_import_cycles_between_modules() -> None:
    graph = build_graph(_sources(LAYER))
    assert cycles(graph) == [], "module-level imports in a cycle"
    assert cycles(every_import(graph)) == [], "a cycle through an import inside a function"


def test_no_import_cycles_between_packages() -> None:
    assert cycles(package_graph(build_graph(_sources(LAYER)))) == []


def test_imports_follow_the_layers() -> None:
    assert wrong_way(build_graph(_sources(LAYER))) == []


def test_the_graph_sees_the_imports_it_checks() -> None:
    graph = build_graph(_sources(LAYER))
    assert graph["db.stream_writer"]["schemas.ids"] is True
    assert "infra.provision" in graph["infra.cli.services"]
    assert len(graph) > 150


def test_a_cycle_between_packages_is_reported() -> None:
    sources = {
        "producers": "",
        "producers.capture": "",
        "producers.capture.intake": "",
        "producers.capture.intake.x": "from producers.capture.worker import raw\n",
        "producers.capture.worker": "",
        "producers.capture.worker.raw": "",
        "producers.capture.worker.objects": "def f():\n    import producers.capture.intake.x\n",
    }
    assert cycles(package_graph(build_graph(sources))) == [
        ["producers.capture.intake", "producers.capture.worker"]
    ]


def test_a_cycle_and_an_upward_import_are_reported() -> None:
    sources = {
        "schemas": "",
        "schemas.a": "from schemas import b\n",
        "schemas.b": "import schemas.a\n",
        "schemas.c": "def later():\n    from schemas import d\n",
        "schemas.d": "import schemas.c\n",
        "db": "",
        "db.x": "from producers.y import thing\n",
        "producers": "",
        "producers.y": "def f():\n    from processors import z\n",
        "processors": "",
        "processors.z": "from . import w\n",
        "processors.w": "from .z import q\n",
    }
    graph = build_graph(sources)
    assert cycles(graph) == [["processors.w", "processors.z"], ["schemas.a", "schemas.b"]]
    assert cycles(every_import(graph)) == [
        ["processors.w", "processors.z"],
        ["schemas.a", "schemas.b"],
        ["schemas.c", "schemas.d"],
    ]
    assert wrong_way(graph) == [
        "db.x -> producers.y: imports up the layers",
        "producers.y -> processors.z: producers and processors meet only on Kafka",
    ]
