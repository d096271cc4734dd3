"""The alert rules as Prometheus reads them: ``promtool check rules`` accepts the rule
file, and ``promtool test rules`` runs its unit tests (``alerts_test.yaml``), which
must fail when an expectation is wrong. promtool comes from Debian's ``prometheus``
package (``make alert-tools``); a host without it, where it cannot be installed,
fails here."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from infra.local import ServiceError
from infra.local.promtool import ensure

RULES = Path(__file__).parents[4] / "infra" / "deploy" / "prometheus"


@pytest.fixture(scope="module")
def promtool() -> str:
    try:
        return ensure(lambda line: print(line, file=sys.stderr))
    except ServiceError as exc:
        pytest.fail(f"promtool is needed to check the alert rules:\n{exc}")


def run(promtool: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_rule_file_is_valid(promtool: str) -> None:
    checked = run(promtool, "check", "rules", "alerts.yaml", cwd=RULES)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout


def test_the_rules_pass_their_unit_tests(promtool: str) -> None:
    tested = run(promtool, "test", "rules", "alerts_test.yaml", cwd=RULES)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_a_wrong_expectation_fails(promtool: str, tmp_path: Path) -> None:
    """A consumer thousands of positions behind fires the position rule the tests
    expect quiet: promtool must say so."""
    shutil.copy(RULES / "alerts.yaml", tmp_path / "alerts.yaml")
    tests = (RULES / "alerts_test.yaml").read_text()
    assert tests.count("values: '3x20'") == 1
    (tmp_path / "alerts_test.yaml").write_text(tests.replace("'3x20'", "'20000x20'"))
    tested = run(promtool, "test", "rules", "alerts_test.yaml", cwd=tmp_path)
    assert tested.returncode != 0
    assert "GaplessConsumerLagging" in tested.stdout + tested.stderr
