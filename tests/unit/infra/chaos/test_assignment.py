"""Which events partitions an agents worker holds, read from its own log."""

from __future__ import annotations

from infra.chaos.assignment import held_partitions

LOG = [
    '{"msg":"[^Worker]: Ready"}',
    '{"msg":"events: assigned [2, 3], resuming from product-database offsets {2: 6267}"}',
    '{"msg":"events: revoked [2, 3]"}',
    '{"msg":"events: assigned [4, 5], resuming from product-database offsets {4: 12521}"}',
]


def test_the_last_assignment_is_what_it_holds() -> None:
    assert held_partitions(LOG) == {4, 5}


def test_a_revocation_after_it_leaves_nothing_held() -> None:
    assert held_partitions([*LOG, '{"msg":"events: revoked [4, 5]"}']) == set()


def test_an_empty_assignment_and_a_log_without_any_hold_nothing() -> None:
    assert held_partitions(['{"msg":"events: assigned [], resuming from … {}"}']) == set()
    assert held_partitions(['{"msg":"[^Worker]: Ready"}']) == set()


def test_each_consumer_of_a_worker_holds_its_own() -> None:
    lines = [
        '{"msg":"events (consumer 1): assigned [0, 1], resuming from … {}"}',
        '{"msg":"events (consumer 2): assigned [2], resuming from … {}"}',
        '{"msg":"events (consumer 1): revoked [0, 1]"}',
        '{"msg":"events (consumer 1): assigned [1], resuming from … {}"}',
    ]
    assert held_partitions(lines) == {1, 2}
    assert held_partitions([*lines, '{"msg":"events (consumer 2): revoked [2]"}']) == {1}
