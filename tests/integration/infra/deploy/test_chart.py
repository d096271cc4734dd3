"""The Helm chart (infra/deploy/helm/gapless) passes ``helm lint --strict``, renders
with its default values and with a values file setting every toggle, and what it
renders passes ``kubeconform -strict`` against Kubernetes 1.30 (and the Prometheus
Operator's CRDs). The validator is shown to refuse an unknown field and a wrong type.
What the chart deploys is checked against the code: every command a real ``gapless``
command line, every GAPLESS_ variable one something reads, secrets only referenced.
"""

from __future__ import annotations

import copy
import json
import subprocess
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.fixtures.deployments import (
    DEPLOYABLE,
    FOREIGN_VARIABLES,
    command_problem,
    read_variables,
    secret_variables,
)
from tests.fixtures.kubernetes import KUBERNETES_VERSION, Validators
from tests.unit.table_writes import ROOT

CHART = ROOT / "infra" / "deploy" / "helm" / "gapless"
EVERY_TOGGLE = CHART / "ci" / "every-toggle-values.yaml"
VALUES = {"default": [], "every toggle": ["--values", str(EVERY_TOGGLE)]}


def _helm(validators: Validators, *args: str) -> str:
    done = subprocess.run(
        [str(validators.helm), *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"helm {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _render(validators: Validators, values: list[str]) -> str:
    return _helm(
        validators,
        "template",
        "gapless",
        str(CHART),
        "--namespace",
        "catalog",
        "--kube-version",
        KUBERNETES_VERSION,
        *values,
    )


def _documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    if doc["kind"] in ("Deployment", "Job"):
        return list(doc["spec"]["template"]["spec"]["containers"])
    return []


def _kubeconform(validators: Validators, documents: list[dict[str, Any]]) -> dict[str, Any]:
    done = validators.kubeconform_run(yaml.safe_dump_all(documents))
    report: dict[str, Any] = json.loads(done.stdout)
    report["returncode"] = done.returncode
    return report


@pytest.mark.parametrize("values", VALUES.values(), ids=VALUES.keys())
def test_chart_lints_strictly(validators: Validators, values: list[str]) -> None:
    _helm(validators, "lint", "--strict", str(CHART), *values)


@pytest.mark.parametrize("values", VALUES.values(), ids=VALUES.keys())
def test_rendered_manifests_are_valid_kubernetes_1_30(
    validators: Validators, values: list[str]
) -> None:
    rendered = _render(validators, values)
    done = validators.kubeconform_run(rendered)
    assert done.returncode == 0, f"kubeconform:\n{done.stdout}\n{done.stderr}"
    summary = json.loads(done.stdout)["summary"]
    documents = _documents(rendered)
    assert summary == {"valid": len(documents), "invalid": 0, "errors": 0, "skipped": 0}
    # A second validator over the built-in kinds: kubernetes-validate's own schemas.
    for doc in documents:
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            continue
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_every_toggle_renders_what_it_toggles(validators: Validators) -> None:
    kinds = {d["kind"] for d in _documents(_render(validators, VALUES["every toggle"]))}
    assert "ServiceMonitor" in kinds and "Job" not in kinds and "ServiceAccount" not in kinds
    kinds = {d["kind"] for d in _documents(_render(validators, VALUES["default"]))}
    assert {"Job", "ServiceAccount", "PodDisruptionBudget"} <= kinds
    assert "ServiceMonitor" not in kinds


def _first(documents: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(d for d in documents if d["kind"] == kind)


def test_the_validator_refuses_an_unknown_field_and_a_wrong_type(
    validators: Validators,
) -> None:
    documents = _documents(_render(validators, VALUES["every toggle"]))
    deployment = _first(documents, "Deployment")
    monitor = _first(documents, "ServiceMonitor")

    unknown = copy.deepcopy(deployment)
    unknown["spec"]["template"]["spec"]["containers"][0]["livenessProbes"] = {}
    wrong_type = copy.deepcopy(deployment)
    wrong_type["spec"]["replicas"] = "two"
    unknown_in_crd = copy.deepcopy(monitor)
    unknown_in_crd["spec"]["endpoints"][0]["scrapePath"] = "/metrics"

    for broken, field in (
        (unknown, "livenessProbes"),
        (wrong_type, "replicas"),
        (unknown_in_crd, "scrapePath"),
    ):
        report = _kubeconform(validators, [broken])
        assert report["returncode"] == 1, report
        (resource,) = report["resources"]
        assert resource["status"] == "statusInvalid", resource
        assert field in resource["msg"], resource
    # The unbroken ones pass, so it is the change that fails them.
    assert _kubeconform(validators, [deployment, monitor])["returncode"] == 0


def _chart_sets(documents: list[dict[str, Any]]) -> tuple[set[str], list[dict[str, Any]]]:
    """The variable names the chart sets (ConfigMap keys, container env), and every
    container env entry."""
    names: set[str] = set()
    entries: list[dict[str, Any]] = []
    for doc in documents:
        if doc["kind"] == "ConfigMap":
            names |= set(doc["data"])
        for container in _containers(doc):
            for entry in container.get("env") or []:
                names.add(entry["name"])
                entries.append(entry)
    return names, entries


@pytest.mark.parametrize("values", VALUES.values(), ids=VALUES.keys())
def test_every_variable_the_chart_sets_is_read(validators: Validators, values: list[str]) -> None:
    names, _ = _chart_sets(_documents(_render(validators, values)))
    unread = sorted(names - read_variables() - FOREIGN_VARIABLES)
    assert unread == [], f"the chart sets variables nothing reads: {unread}"
    assert len(names & read_variables()) > 10


@pytest.mark.parametrize("values", VALUES.values(), ids=VALUES.keys())
def test_secrets_are_only_referenced(validators: Validators, values: list[str]) -> None:
    documents = _documents(_render(validators, values))
    assert "Secret" not in {d["kind"] for d in documents}
    secrets = secret_variables() | FOREIGN_VARIABLES
    config = next(d for d in documents if d["kind"] == "ConfigMap")["data"]
    assert sorted(secrets & set(config)) == []
    _, entries = _chart_sets(documents)
    plain = sorted(e["name"] for e in entries if e["name"] in secrets and "value" in e)
    assert plain == []
    referenced = {e["name"] for e in entries if "secretKeyRef" in e.get("valueFrom", {})}
    assert referenced == secrets


def test_the_chart_deploys_every_process_through_a_real_command(validators: Validators) -> None:
    documents = _documents(_render(validators, VALUES["default"]))
    deployed: set[str] = set()
    for doc in documents:
        for container in _containers(doc):
            assert container["command"] == ["gapless"]
            assert command_problem(container["args"]) is None, command_problem(container["args"])
            if doc["kind"] == "Deployment":
                deployed.add(container["args"][0])
            else:
                assert container["args"][0] == "migrate"
    assert deployed == DEPLOYABLE


def test_probes_and_ports_follow_the_port_variable(validators: Validators) -> None:
    for doc in _documents(_render(validators, VALUES["default"])):
        if doc["kind"] != "Deployment":
            continue
        (container,) = _containers(doc)
        ports = container.get("ports", [])
        if not ports:
            assert "livenessProbe" not in container and "readinessProbe" not in container
            continue
        (port,) = ports
        env = {e["name"]: e.get("value") for e in container["env"]}
        variables = [n for n in env if n.endswith("_PORT") and n in read_variables()]
        assert len(variables) == 1, (doc["metadata"]["name"], variables)
        assert env[variables[0]] == str(port["containerPort"])
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
        security = container["securityContext"]
        assert security["allowPrivilegeEscalation"] is False
        assert security["readOnlyRootFilesystem"] is True
        assert doc["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
        assert {"requests", "limits"} <= set(container["resources"])


def test_the_alert_rules_are_a_valid_prometheus_rule_spec(validators: Validators) -> None:
    """The rule file is also the spec of a PrometheusRule: validated against the
    Prometheus Operator's CRD (groups, rules and their fields, closed to others)."""
    rules = yaml.safe_load((ROOT / "infra" / "deploy" / "prometheus" / "alerts.yaml").read_text())
    resource = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "gapless"},
        "spec": rules,
    }
    assert _kubeconform(validators, [resource])["returncode"] == 0
    misspelt = copy.deepcopy(resource)
    misspelt["spec"]["groups"][0]["rules"][0]["expresion"] = "up"
    assert _kubeconform(validators, [misspelt])["returncode"] == 1


def test_a_tracing_endpoint_reaches_every_process_only_when_set(validators: Validators) -> None:
    def rendered(values: list[str]) -> dict[str, str]:
        """The ConfigMap's data, once every Deployment is seen to read it."""
        documents = _documents(_render(validators, values))
        config = next(d for d in documents if d["kind"] == "ConfigMap")
        deployments = [d for d in documents if d["kind"] == "Deployment"]
        assert deployments
        for doc in deployments:
            (container,) = _containers(doc)
            sources = [s["configMapRef"]["name"] for s in container["envFrom"]]
            assert sources == [config["metadata"]["name"]], doc["metadata"]["name"]
        data: dict[str, str] = config["data"]
        return data

    assert "OTEL_EXPORTER_OTLP_ENDPOINT" not in rendered(VALUES["default"])
    traced = rendered(["--set", "tracing.otlpEndpoint=http://otel-collector:4318"])
    assert traced["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:4318"
