"""Parser versions pin output: each fixture's golden extraction records, per parser
version, the digest of what that version extracts. Changing the output without
bumping the adapter's entry in ``PARSER_VERSIONS`` fails, naming both."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from producers.capture.adapters import ADAPTERS, PARSER_VERSIONS, adapter_named
from producers.capture.adapters.base import Extraction
from tests.fixtures.source_captures import (
    SourceCapture,
    all_source_captures,
    extraction_digest,
    read_golden,
)

REGENERATE = "python -m tests.fixtures.source_captures"


def golden_problem(capture: SourceCapture, extraction: Extraction, golden: dict[str, Any]) -> str:
    """Why ``extraction`` does not match the golden of ``capture`` ('' when it does)."""
    name, version = capture.adapter, extraction.parser_version
    digests: dict[str, str] = golden["digests"]
    newest = max(int(v) for v in digests)
    if version < newest:
        return f"{capture}: PARSER_VERSIONS[{name!r}] is {version}, below {newest} already recorded"
    recorded = digests.get(str(version))
    if recorded is None:
        return f"{capture}: parser version {version} of {name} has no golden; run {REGENERATE}"
    if recorded != extraction_digest(extraction):
        return (
            f"{capture}: the {name} extraction changed but PARSER_VERSIONS[{name!r}] is still"
            f" {version}; bump it, then run {REGENERATE}"
        )
    if golden["extraction"] != extraction.as_json():
        return f"{capture}: the golden extraction was edited by hand; run {REGENERATE}"
    return ""


def test_registered_adapters_and_parser_versions_agree() -> None:
    assert set(PARSER_VERSIONS) == set(ADAPTERS)
    for name, adapter in ADAPTERS.items():
        assert adapter.parser_version == PARSER_VERSIONS[name] >= 1


@pytest.mark.parametrize("capture", all_source_captures(), ids=str)
def test_each_fixture_extracts_its_golden_under_its_parser_version(capture: SourceCapture) -> None:
    assert capture.golden_path.exists(), f"{capture} has no golden; run {REGENERATE}"
    extraction = adapter_named(capture.adapter).parse(capture.envelope)
    assert extraction.parser_version == PARSER_VERSIONS[capture.adapter]
    assert golden_problem(capture, extraction, read_golden(capture)) == ""


def test_changed_output_under_the_same_version_names_adapter_and_version() -> None:
    capture = next(c for c in all_source_captures() if c.adapter == "json-feed")
    extraction = adapter_named(capture.adapter).parse(capture.envelope)
    golden = read_golden(capture)
    changed = replace(extraction, products=extraction.products[1:])
    problem = golden_problem(capture, changed, golden)
    version = PARSER_VERSIONS["json-feed"]
    assert f"PARSER_VERSIONS['json-feed'] is still {version}; bump it" in problem
    bumped = replace(changed, parser_version=version + 1)
    assert f"parser version {version + 1} of json-feed has no golden" in golden_problem(
        capture, bumped, golden
    )
    lowered = {**golden, "digests": {**golden["digests"], str(version + 1): "x"}}
    assert "below" in golden_problem(capture, extraction, lowered)
