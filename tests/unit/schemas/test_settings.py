"""Every setting a process reads is in the configuration table (``docs/configuration.md``),
and every variable in the table is read.

Imports every ``settings.py`` module of the packages, walks the subclasses of
``GaplessSettings`` (every settings class derives from it, which this test also
holds) and collects each field's variables, deprecated aliases included. The
documented side is the first column of the table in ``docs/configuration.md``. Variables
read outside settings classes are listed in ``READ_ELSEWHERE``; they must be in the
table too, and found in the packages' source.
"""

from __future__ import annotations

import ast
import importlib
import re

from pydantic import SecretStr

from schemas.settings import ENV_PREFIX, GaplessSettings
from tests.unit.table_writes import ROOT, package_modules, relative

CONFIGURATION = ROOT / "docs" / "configuration.md"
VARIABLE = re.compile(rf"\b{ENV_PREFIX}[A-Z0-9_]*[A-Z0-9]\b")

READ_ELSEWHERE = {
    # infra/local/layout.py: where, and on which ports, `gapless up` runs the local
    # services (read before any settings class, to find them).
    "GAPLESS_LOCAL_DIR",
    "GAPLESS_LOCAL_PG_PORT",
    "GAPLESS_LOCAL_KAFKA_PORT",
    "GAPLESS_LOCAL_KAFKA_CONTROLLER_PORT",
    "GAPLESS_LOCAL_KAFKA_BROKERS",
    "GAPLESS_LOCAL_PG_STANDBY",
    "GAPLESS_LOCAL_S3_PORT",
    "GAPLESS_LOCAL_REGISTRY_PORT",
    "GAPLESS_LOCAL_REGISTRY_MANAGEMENT_PORT",
    "GAPLESS_LOCAL_PROXY_PORT",
    # infra/local/jaeger.py (through the layout): the local Jaeger's ports.
    "GAPLESS_LOCAL_JAEGER_OTLP_PORT",
    "GAPLESS_LOCAL_JAEGER_QUERY_PORT",
    "GAPLESS_LOCAL_JAEGER_QUERY_GRPC_PORT",
    "GAPLESS_LOCAL_JAEGER_HEALTH_PORT",
    "GAPLESS_LOCAL_JAEGER_METRICS_PORT",
    # infra/local/registry.py: the java that runs the local schema registry.
    "GAPLESS_LOCAL_REGISTRY_JAVA",
    # infra/cli/output.py: who an operator command acts as, for the audit trail.
    "GAPLESS_OPERATOR",
    # infra/chaos: the campaign's block of ports, and the crash points a process of
    # the campaign is armed with (one, or several once each through a shared ledger).
    "GAPLESS_CHAOS_PORT_BASE",
    "GAPLESS_CHAOS_CRASH_POINT",
    "GAPLESS_CHAOS_CRASH_PASSES",
    "GAPLESS_CHAOS_CRASH_ONCE",
    "GAPLESS_CHAOS_CRASH_LEDGER",
}


def _settings_modules() -> list[str]:
    return sorted(
        relative(p).removesuffix(".py").replace("/", ".")
        for p in package_modules()
        if p.name == "settings.py"
    )


def _settings_classes() -> list[type[GaplessSettings]]:
    for module in _settings_modules():
        importlib.import_module(module)
    found: list[type[GaplessSettings]] = []
    todo = [GaplessSettings]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in found:
                found.append(sub)
                todo.append(sub)
    return sorted(found, key=lambda c: f"{c.__module__}.{c.__qualname__}")


def read_by_settings() -> dict[str, str]:
    """variable -> the settings class (module.Class) declaring the field it sets."""
    found: dict[str, str] = {}
    for cls in _settings_classes():
        declared = vars(cls).get("__annotations__", {})
        for name, variables in cls.variables().items():
            for variable in variables:
                if name in declared or variable not in found:
                    found[variable] = f"{cls.__module__}.{cls.__qualname__}"
    return found


def in_docs() -> set[str]:
    """The variables in the first column of the configuration table."""
    rows = [line for line in CONFIGURATION.read_text().splitlines() if line.startswith("| ")]
    assert len(rows) > 10, "docs/configuration.md has no configuration table"
    return {v for row in rows for v in VARIABLE.findall(row.split(" | ", 1)[0])}


def in_source() -> set[str]:
    return {v for p in package_modules() for v in VARIABLE.findall(p.read_text())}


def test_every_variable_read_is_documented_and_every_documented_one_is_read() -> None:
    read = read_by_settings()
    documented = in_docs()
    undocumented = sorted(f"{v} ({read[v]})" for v in read.keys() - documented)
    unread = sorted(documented - read.keys() - READ_ELSEWHERE)
    missing_elsewhere = sorted(READ_ELSEWHERE - documented)
    assert (undocumented, unread, missing_elsewhere) == ([], [], []), (
        f"read but not in docs/configuration.md's table: {undocumented}; in the table but read by"
        f" no settings class nor allowed in READ_ELSEWHERE: {unread}; allowed but not in"
        f" the table: {missing_elsewhere}"
    )


def test_variables_outside_settings_classes_are_the_allowed_ones() -> None:
    """A variable the packages name that no settings class reads is read some other
    way: it belongs in ``READ_ELSEWHERE`` (and so in docs/configuration.md)."""
    named = in_source()
    assert sorted(named - read_by_settings().keys() - READ_ELSEWHERE) == []
    assert sorted(READ_ELSEWHERE - named) == [], "allowed, but nothing names it any more"


def test_every_settings_class_derives_from_the_base() -> None:
    """Only the base subclasses ``BaseSettings``, and settings classes live in
    ``settings.py`` modules (where the test above finds them)."""
    names = {c.__name__ for c in _settings_classes()} | {"GaplessSettings", "BaseSettings"}
    problems = []
    for path in package_modules():
        where = relative(path)
        tree = ast.parse(path.read_text(), where)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "pydantic_settings":
                imported = {a.name for a in node.names}
                if "BaseSettings" in imported and where != "schemas/settings.py":
                    problems.append(f"{where}:{node.lineno}: imports BaseSettings")
            elif isinstance(node, ast.ClassDef) and path.name != "settings.py":
                bases = {ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases}
                if bases & names:
                    problems.append(f"{where}:{node.lineno}: settings class {node.name}")
    assert problems == []


def test_each_description_names_its_own_variable() -> None:
    """A description that starts with a variable starts with the field's own."""
    wrong = []
    for cls in _settings_classes():
        for name, info in cls.model_fields.items():
            named = VARIABLE.match(info.description or "")
            if named and named.group() != cls.variables()[name][0]:
                wrong.append(f"{cls.__qualname__}.{name}: {named.group()}")
    assert wrong == []


def test_settings_holding_a_secret_hide_what_was_given() -> None:
    """A secret pasted into the wrong variable must not reach an error message."""
    exposed = [
        cls.__qualname__
        for cls in _settings_classes()
        if any(SecretStr in _types(info.annotation) for info in cls.model_fields.values())
        and not cls.model_config.get("hide_input_in_errors")
    ]
    assert exposed == []


def _types(annotation: object) -> set[object]:
    args = getattr(annotation, "__args__", ())
    return {annotation, *args}
