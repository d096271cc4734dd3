"""Every metric the Grafana dashboard (infra/deploy/grafana/gapless.json) and the alert
rules (infra/deploy/prometheus/alerts.yaml) name is one a process exports.

The exported names come from the packages' source by AST: every metric object or
metric family constructed with a literal name (a name built at run time could not be
checked, so none may be), expanded as prometheus_client exposes it: a counter as
``_total``, a histogram's (also ``schemas.latency``'s ``Latencies``) and a summary's
series as ``_bucket``, ``_sum``, ``_count``.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

import yaml

from tests.unit.table_writes import ROOT, package_modules, parse, relative

DASHBOARD = ROOT / "infra" / "deploy" / "grafana" / "gapless.json"
ALERTS = ROOT / "infra" / "deploy" / "prometheus" / "alerts.yaml"
METRIC = re.compile(r"\bgapless_[a-z0-9_]*[a-z0-9]\b")

_SERIES = {
    "Counter": ("_total",),
    "CounterMetricFamily": ("_total",),
    "Gauge": ("",),
    "GaugeMetricFamily": ("",),
    "Histogram": ("_bucket", "_sum", "_count"),
    "HistogramMetricFamily": ("_bucket", "_sum", "_count"),
    "Latencies": ("_bucket", "_sum", "_count"),
    "Summary": ("_sum", "_count"),
    "SummaryMetricFamily": ("_sum", "_count"),
    "Info": ("_info",),
}


def _constructor(call: ast.Call) -> str | None:
    func = call.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
    return name if name in _SERIES else None


def exported() -> tuple[set[str], list[str]]:
    """The series names the packages export, and the constructions whose name is not
    a literal."""
    names: set[str] = set()
    unreadable: list[str] = []
    for path in package_modules():
        source = path.read_text()
        if "prometheus_client" not in source and "schemas.latency" not in source:
            continue
        tree = parse(source, relative(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or (kind := _constructor(node)) is None:
                continue
            first = node.args[0] if node.args else None
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                # collections.Counter(...) and friends take no metric name.
                if isinstance(first, ast.JoinedStr) or any(k.arg == "name" for k in node.keywords):
                    unreadable.append(f"{relative(path)}:{node.lineno}")
                continue
            base = first.value.removesuffix("_total") if "Counter" in kind else first.value
            names |= {base + suffix for suffix in _SERIES[kind]}
    return names, unreadable


def _exprs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["expr"]] if isinstance(node.get("expr"), str) else []
        return own + [e for v in node.values() for e in _exprs(v)]
    if isinstance(node, list):
        return [e for v in node for e in _exprs(v)]
    return []


def test_metric_names_are_literal_so_they_can_be_found() -> None:
    names, unreadable = exported()
    assert unreadable == []
    # The scan sees the metrics of every process that exports some.
    for expected in (
        "gapless_relay_published_total",
        "gapless_applier_events_total",
        "gapless_retention_consumer_lag_positions",
        "gapless_read_api_request_seconds_bucket",
        "gapless_worker_items_total",
        "gapless_evidence_deleted_total",
    ):
        assert expected in names


def test_every_metric_the_dashboard_and_the_rules_name_is_exported() -> None:
    names, _ = exported()
    dashboard = _exprs(json.loads(DASHBOARD.read_text()))
    rules = _exprs(yaml.safe_load(ALERTS.read_text()))
    assert len(dashboard) > 10 and len(rules) >= 4
    unknown = sorted({m for expr in dashboard + rules for m in METRIC.findall(expr)} - names)
    assert unknown == []


def test_the_dashboard_covers_what_operators_watch() -> None:
    named = {m for e in _exprs(json.loads(DASHBOARD.read_text())) for m in METRIC.findall(e)}
    assert {
        "gapless_retention_consumer_lag_positions",  # lag in positions per stream
        "gapless_retention_floor_position",  # the floor and what holds it
        "gapless_retention_held_back_positions",
        "gapless_applier_parked_events",
        "gapless_applier_quarantine_open",
        "gapless_rebuild_chunks_loaded",  # rebuild progress
        "gapless_relay_published_total",  # relay rate
        "gapless_applier_events_total",  # applier rate
    } <= named


def test_the_rules_alert_on_lag_blocked_retention_leases_and_quarantine() -> None:
    rules = yaml.safe_load(ALERTS.read_text())["groups"][0]["rules"]
    by_metric = {m: r["alert"] for r in rules for m in METRIC.findall(r["expr"])}
    for metric in (
        "gapless_retention_consumer_lag_positions",
        "gapless_retention_held_back_positions",
        "gapless_retention_lease_seconds_to_expiry",
        "gapless_applier_quarantine_open",
    ):
        assert metric in by_metric, metric
    for rule in rules:
        assert {"alert", "expr", "labels", "annotations"} <= set(rule), rule
        assert rule["labels"]["severity"] in ("warning", "critical")
