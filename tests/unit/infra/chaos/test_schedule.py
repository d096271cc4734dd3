"""The fault plan: reproducible from its seed, and as many faults of each kind as asked."""

from __future__ import annotations

import itertools

from infra.chaos import schedule
from infra.chaos.schedule import Options

PROCESSES = ("relay-1", "relay-2", "agents-1", "agents-2", "resolver-worker-1", "resolver-api-1")
OPTIONS = Options(seconds=120.0, kills=200, processes=PROCESSES, proxy_faults=3)


def test_the_same_seed_gives_the_same_plan() -> None:
    assert schedule.plan(7, OPTIONS) == schedule.plan(7, OPTIONS)


def test_another_seed_gives_another_plan() -> None:
    assert schedule.plan(7, OPTIONS) != schedule.plan(8, OPTIONS)


def test_the_plan_holds_every_fault_asked_for_in_order() -> None:
    planned = schedule.plan(3, OPTIONS)
    counts = schedule.counts(planned)
    assert counts[schedule.KILL] == 200 + 2  # and a writer and a worker in the outage
    assert counts[schedule.PG_FAST] == 2 and counts[schedule.PG_IMMEDIATE] == 2
    assert counts[schedule.BROKER_KILL] == 3
    assert counts[schedule.S3_DOWN] == 2
    assert counts[schedule.REGISTRY_RESTART] == 1 and counts[schedule.REGISTRY_DOWN] == 1
    assert sum(counts.get(k, 0) for k in schedule.PROXY_KINDS) == 3
    assert [p.at for p in planned] == sorted(p.at for p in planned)
    assert all(0 <= p.at <= OPTIONS.seconds for p in planned)


def test_kills_reach_every_process_and_arm_their_own_crash_points() -> None:
    kills = [p for p in schedule.plan(11, OPTIONS) if p.kind == schedule.KILL]
    assert {p.target for p in kills} == set(PROCESSES)
    armed = [p for p in kills if p.armed is not None]
    assert armed, "some restarts carry a crash point"
    for p in armed:
        assert p.armed is not None
        assert p.armed.point in schedule.CRASH_POINTS[schedule.kind_of(p.target)]
        assert 1 <= p.armed.passes <= schedule.MAX_PASSES
    points = {p.armed.point for p in armed if p.armed is not None}
    assert points == {pt for pts in schedule.CRASH_POINTS.values() for pt in pts}


def test_service_faults_never_overlap() -> None:
    services = [p for p in schedule.plan(5, OPTIONS) if p.kind != schedule.KILL]
    for earlier, later in itertools.pairwise(services):
        assert earlier.at + earlier.hold <= later.at, (earlier, later)


def test_one_postgres_restart_is_fast_or_immediate() -> None:
    one = Options(seconds=30.0, kills=0, processes=PROCESSES, pg_restarts=1)
    kinds = {p.kind for p in schedule.plan(1, one)}
    assert kinds & {schedule.PG_FAST, schedule.PG_IMMEDIATE}


def test_proxy_faults_are_drops_and_stalls_that_outlast_the_timeouts() -> None:
    planned = schedule.plan(9, OPTIONS)
    stalls = [p for p in planned if p.kind == "proxy_stall"]
    drops = [p for p in planned if p.kind == "proxy_drop"]
    assert len(drops) == 2 and len(stalls) == 1  # drop, stall, drop …
    # Longer than the agents' 10-s group session, the longest client timeout a
    # stalled process meets before it must give up and reconnect.
    assert all(p.hold > 10.0 for p in stalls)
    assert all(p.target in schedule.SERVICE_TARGETS for p in stalls + drops)


def test_a_process_without_crash_points_is_killed_but_never_armed() -> None:
    options = Options(seconds=60.0, kills=60, processes=("sweep-jobs-1", "relay-1"))
    kills = [p for p in schedule.plan(4, options) if p.kind == schedule.KILL]
    sweeper = [p for p in kills if p.target == "sweep-jobs-1"]
    assert sweeper and all(p.armed is None for p in sweeper)
    assert any(p.armed is not None for p in kills if p.target == "relay-1")


def test_a_writer_and_an_agents_worker_start_again_while_the_registry_is_down() -> None:
    planned = schedule.plan(13, OPTIONS)
    [outage] = [p for p in planned if p.kind == schedule.REGISTRY_DOWN]
    assert outage.target == "registry" and outage.hold == schedule.REGISTRY_DOWN_S
    during = {
        p.target
        for p in planned
        if p.kind == schedule.KILL and outage.at < p.at < outage.at + outage.hold / 4
    }
    assert {"resolver-api-1", "agents-1"} <= during
    [restart] = [p for p in planned if p.kind == schedule.REGISTRY_RESTART]
    assert restart.target == "registry" and 0 < restart.hold <= 3.0


def test_on_a_cluster_broker_faults_are_leader_kills_and_no_proxy_fault_targets_kafka() -> None:
    cluster = Options(seconds=60.0, kills=10, processes=PROCESSES, proxy_faults=12, cluster=True)
    for seed in range(5):
        planned = schedule.plan(seed, cluster)
        counts = schedule.counts(planned)
        assert counts[schedule.LEADER_KILL] == 3 and schedule.BROKER_KILL not in counts
        leaders = [p for p in planned if p.kind == schedule.LEADER_KILL]
        # Down past the controllers' fencing, however crowded the plan: leadership moves.
        assert all(p.target == "kafka" and p.hold >= 8.0 for p in leaders)
        proxied = [p for p in planned if p.kind in schedule.PROXY_KINDS]
        assert len(proxied) == 12 and {p.target for p in proxied} <= {"postgres", "s3"}
