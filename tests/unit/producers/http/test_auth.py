"""Token hashes scoped to tenants (GAPLESS_API_TOKENS)."""

from __future__ import annotations

import pytest

from producers.http.auth import Grant, parse_grants, token_hash

H1 = token_hash("one")
H2 = token_hash("two")


def test_tokens_are_configured_by_hash_with_tenants_or_star() -> None:
    grants = parse_grants(f"{H1}:t1|t2, {H2.upper()}:*")
    assert grants[H1] == Grant(frozenset({"t1", "t2"}))
    assert grants[H2] == Grant(None)
    assert grants[H1].allows("t1") and not grants[H1].allows("t3")
    assert grants[H2].allows("anyone")


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("", "no token"),
        ("one:t1", "64 hex digits"),
        (f"{H1}", "tenant names"),
        (f"{H1}:t1||t2", "tenant names"),
        (f"{H1}:t1,{H1}:t2", "twice"),
    ],
)
def test_bad_token_lists_are_refused_without_echoing_them(spec: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem) as caught:
        parse_grants(spec)
    assert H1 not in str(caught.value)
