"""The campaign's fault plan: what happens when, decided by one ``random.Random(seed)``.

The plan is data (``Planned`` rows), made before anything starts, so the same seed
and options give the same plan, and a failing run is reproduced by its seed. Two
lanes run side by side:

- kills: ``kills`` SIGKILLs of a random process at random instants over the
  campaign's seconds; after a kill the process is started again at once (the
  restart policy a container runtime applies), and about one restart in three is
  *armed* with a crash point (``infra.chaos.crashpoints``): that incarnation dies on
  its own in a narrow window (between produce and the published-position update,
  after the applier's commit before its acknowledgement, between the evidence put
  and the intake commit, around a checkpoint move, inside a rebuild's load
  transaction) the n-th time it passes there;
- services: PostgreSQL restarts (fast and immediate shutdown), broker SIGKILLs (on a
  three-node cluster, ``cluster``: SIGKILLs of the node leading most of the events
  topic's partitions, started again after the hold), the
  object store down for a while, the schema registry restarted and stopped for
  ``REGISTRY_DOWN_S``, and proxy faults when a proxy is available, one at a time,
  each held ``hold`` seconds before it is healed, in slots spread over the campaign
  so they never overlap. While the registry is down a writer and an agents worker
  are killed (``_met_by_the_outage``): started again then, they have no schema id
  cached and meet the outage (the writer answers 503, the worker retries its batch).

Not in the plan: the rebuild's phase boundaries and the cutover's steps
(``crashpoints.REBUILD_POINTS``). A rebuild passes each once, at an instant no plan
can know, in whichever agents worker carries it then; so every agents incarnation is
armed with all of them at once, each to kill once in the whole campaign
(``crashpoints.Ledger``), and the campaign checks that each one did.

What the instants mean at run time (starting a process, waiting for a service) is
the campaign's business; the plan only orders them.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

KILL = "kill"
PG_FAST = "pg_restart_fast"
PG_IMMEDIATE = "pg_restart_immediate"
BROKER_KILL = "broker_kill"
LEADER_KILL = "leader_kill"
"""On a cluster: the events topic's busiest leader SIGKILLed, started after the hold."""
LEADER_DOWN_S = (8.0, 12.0)
"""How long a killed leader stays down: past the controllers' fencing of a silent node
(``infra.local.kafka_nodes.SESSION_TIMEOUT_MS``), so its partitions' leadership moves
to the other nodes every time, and moves again when it is back."""
S3_DOWN = "object_store_down"
REGISTRY_RESTART = "registry_restart"
REGISTRY_DOWN = "registry_down"
REGISTRY_DOWN_S = 30.0
"""How long the registry's outage lasts: longer than any client's retries of one call."""
PROXY_KINDS = ("proxy_drop", "proxy_stall")
"""Proxy faults: connections cut, or held longer than the clients' timeouts."""
SERVICE_TARGETS = ("postgres", "kafka", "s3")

CRASH_POINTS: Mapping[str, tuple[str, ...]] = {
    "relay": ("relay.produced",),
    "agents": ("applier.committed", "rebuild.load"),
    "resolver-worker": ("worker.checkpoint",),
    "resolver-api": ("intake.evidence_put",),
    "sweep-jobs": (),
}
"""The narrow windows each kind of process can be armed to die in (see
``infra.chaos.crashpoints``); the agents' rebuild points other than ``rebuild.load``
are the rebuild lane's (``crashpoints.REBUILD_POINTS``, every incarnation, once each)."""
ARMED_SHARE = 1 / 3
MAX_PASSES = 4
"""An armed incarnation dies on pass 1 … MAX_PASSES through its point."""
SETTLE_S = 3.0
"""No service fault starts in the campaign's first and last seconds."""

STALL_S = (12.0, 20.0)
"""A stall outlasts the clients' timeouts it can meet (the agents' 10-s group
session, the object store client's 3-s connect); it takes that much of the
campaign's time and the other service faults share the rest."""


@dataclass(frozen=True, slots=True)
class Armed:
    point: str
    passes: int
    """It dies the ``passes``-th time it reaches ``point``."""


@dataclass(frozen=True, slots=True)
class Planned:
    at: float
    """Seconds after the faults start."""
    kind: str
    target: str
    """A process's name (``relay-1``…) or a service (``postgres``, ``kafka``, ``s3``)."""
    hold: float = 0.0
    """Seconds between ``apply`` and ``heal``."""
    armed: Armed | None = None
    """For a kill: the crash point the restarted incarnation carries."""


@dataclass(frozen=True, slots=True)
class Options:
    seconds: float
    kills: int
    processes: Sequence[str]
    """Names of the processes, ``<kind>-<n>`` (kind as in ``CRASH_POINTS``)."""
    pg_restarts: int = 4
    broker_restarts: int = 3
    s3_outages: int = 2
    registry_restarts: int = 1
    registry_outages: int = 1
    proxy_faults: int = 0
    """0 unless a TCP fault proxy runs between the processes and the services."""
    cluster: bool = False
    """Three Kafka nodes: broker faults are leader kills, and no proxy is in front of
    Kafka (its proxy faults go to PostgreSQL and the object store)."""


def kind_of(process: str) -> str:
    """``agents-2`` → ``agents``."""
    return process.rsplit("-", 1)[0]


def plan(seed: int, options: Options) -> list[Planned]:
    """Every fault of the campaign in the order of its instant."""
    rng = random.Random(seed)
    kills = [_kill(rng, options) for _ in range(options.kills)]
    services = _services(rng, options)
    planned = kills + services + _met_by_the_outage(services, options)
    return sorted(planned, key=lambda p: (p.at, p.kind, p.target))


def _met_by_the_outage(services: Sequence[Planned], options: Options) -> list[Planned]:
    """A kill of the first writer and of the first agents worker a few seconds into
    each registry outage: their next incarnations start while it is down."""
    first = {
        kind: min(p for p in options.processes if kind_of(p) == kind)
        for kind in ("resolver-api", "agents")
        if any(kind_of(p) == kind for p in options.processes)
    }
    return [
        Planned(round(outage.at + delay, 3), KILL, process)
        for outage in services
        if outage.kind == REGISTRY_DOWN
        for delay, process in zip((2.0, 4.0), first.values(), strict=False)
    ]


def _kill(rng: random.Random, options: Options) -> Planned:
    target = rng.choice(sorted(options.processes))
    armed = None
    points = CRASH_POINTS[kind_of(target)]
    if rng.random() < ARMED_SHARE and points:
        armed = Armed(rng.choice(points), rng.randint(1, MAX_PASSES))
    return Planned(round(rng.uniform(0, options.seconds), 3), KILL, target, armed=armed)


def _services(rng: random.Random, options: Options) -> list[Planned]:
    """At least one fast and one immediate PostgreSQL restart when there are two or
    more, and as many connection drops as stalls; the kinds shuffled over equal
    slots, each fault somewhere in its slot."""
    pg = [PG_FAST, PG_IMMEDIATE] * (options.pg_restarts // 2)
    if options.pg_restarts % 2:
        pg.append(rng.choice((PG_FAST, PG_IMMEDIATE)))
    kinds = (
        pg
        + [LEADER_KILL if options.cluster else BROKER_KILL] * options.broker_restarts
        + [S3_DOWN] * options.s3_outages
        + [REGISTRY_RESTART] * options.registry_restarts
        + [REGISTRY_DOWN] * options.registry_outages
        + [PROXY_KINDS[i % 2] for i in range(options.proxy_faults)]
    )
    rng.shuffle(kinds)
    if not kinds:
        return []
    # A stall's and the registry outage's lengths are fixed; the others share what is
    # left in equal slots.
    fixed = [_fixed(rng, k) for k in kinds]
    usable = max(options.seconds - 2 * SETTLE_S - sum(fixed), 1.0)
    others = sum(1 for f in fixed if not f)
    slot = usable / max(others, 1)
    planned = []
    start = SETTLE_S
    for kind, length in zip(kinds, fixed, strict=True):
        if length:
            hold, room = length, length
        else:
            hold = _hold(rng, kind, slot)
            room = slot
        at = start + rng.uniform(0, max(room - hold, 0.0) * 0.8)
        target = _target(rng, kind, options.cluster)
        planned.append(Planned(round(at, 3), kind, target, round(hold, 3)))
        start += room
    return planned


def _fixed(rng: random.Random, kind: str) -> float:
    """The length of a fault that lasts as long as it must (0: one that shares a slot)."""
    if kind == "proxy_stall":
        return rng.uniform(*STALL_S)
    if kind == LEADER_KILL:
        return rng.uniform(*LEADER_DOWN_S)
    return REGISTRY_DOWN_S if kind == REGISTRY_DOWN else 0.0


def _hold(rng: random.Random, kind: str, slot: float) -> float:
    """How long the fault lasts: PostgreSQL and the broker are back within seconds,
    the object store stays away longer; never more than most of its slot."""
    low, high = {
        PG_FAST: (0.5, 3.0),
        PG_IMMEDIATE: (0.0, 2.0),
        BROKER_KILL: (1.0, 5.0),
        S3_DOWN: (5.0, 12.0),
        REGISTRY_RESTART: (0.5, 3.0),
        "proxy_drop": (1.0, 4.0),
    }[kind]
    return min(rng.uniform(low, high), 0.6 * slot)


def _target(rng: random.Random, kind: str, cluster: bool) -> str:
    if kind in (PG_FAST, PG_IMMEDIATE):
        return "postgres"
    if kind in (BROKER_KILL, LEADER_KILL):
        return "kafka"
    if kind == S3_DOWN:
        return "s3"
    if kind in (REGISTRY_RESTART, REGISTRY_DOWN):
        return "registry"
    return rng.choice([t for t in SERVICE_TARGETS if not (cluster and t == "kafka")])


def counts(planned: Sequence[Planned]) -> dict[str, int]:
    """Faults by kind (armed kills also under ``armed:<point>``)."""
    found: dict[str, int] = {}
    for p in planned:
        found[p.kind] = found.get(p.kind, 0) + 1
        if p.armed is not None:
            key = f"armed:{p.armed.point}"
            found[key] = found.get(key, 0) + 1
    return found
