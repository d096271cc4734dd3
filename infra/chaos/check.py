"""After the faults: what the databases and the topic say, and every violation in it.

``observe`` reads (once the campaign converged, or gave up waiting):
- per stream of the run: the committed cursor and whether it was fenced (resolver),
  its published position, the positions present on the events topic (read from the
  beginning to its end), the live consumer's durable progress, applied, ignored and
  loaded-by-a-rebuild counts, and inbox positions holding more than one event (product);
- the run's capture jobs and their status; the quarantine; the projections compared
  with the accepted state row by row (the demo's check, each catalog in the
  generation it is served from).

``judge`` turns observations (and what the campaign saw while it ran: progress
regressions, processes that exited on their own, workload errors) into figures and
violations. It is pure, so the unit tests feed it crafted violations and see each
reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import psycopg
from confluent_kafka import Consumer, TopicPartition

from infra.demo.projection_check import compare_serving
from schemas.errors import GaplessError
from schemas.registry_codec import codec_for
from schemas.settings import KafkaSettings, SchemaRegistrySettings

Stream = tuple[str, str, int]
TERMINAL_JOB_STATES = ("done", "failed", "skipped")


@dataclass(frozen=True, slots=True)
class StreamFacts:
    stream: Stream
    committed: int
    published: int
    fenced: bool
    """A newer epoch superseded it: its unpublished tail is never published, and the
    catalog is checked in its current epoch and by the projections."""
    on_topic: frozenset[int]
    progress: int
    applied: int
    """Applied and ignored-as-stale by the live consumer (each event once)."""
    inbox_doubles: int
    """Positions the live consumer's inbox holds under more than one event id."""


@dataclass
class Observations:
    streams: list[StreamFacts] = field(default_factory=list)
    jobs: dict[str, str] = field(default_factory=dict)
    """Capture job id → status."""
    quarantined: list[bytes | None] = field(default_factory=list)
    """The value of each open quarantine entry of the run's consumer."""
    poison: list[bytes] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    rows_compared: int = 0
    undecodable_on_topic: int = 0


@dataclass
class Seen:
    """What the campaign saw while it ran."""

    regressions: list[str] = field(default_factory=list)
    exited_on_their_own: list[str] = field(default_factory=list)
    workload_errors: list[str] = field(default_factory=list)
    rebuild_phase: str | None = None
    fence_done: bool = False
    converged: bool = False
    lane_workers: int = 0
    """Agents workers the rebuild lane ran with (0: no lane, nothing to check)."""
    lane_unreached: list[str] = field(default_factory=list)
    """Rebuild crash points no worker died at (``infra.chaos.lane``)."""
    lane_most_workers: int = 0
    """The most distinct workers killed at the lane's points in one rebuild."""


@dataclass
class Verdict:
    lost: int = 0
    doubled: int = 0
    mismatched_rows: int = 0
    progress_regressions: int = 0
    stuck_jobs: int = 0
    unexpected_quarantine: int = 0
    events_committed: int = 0
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations


def judge(observed: Observations, seen: Seen) -> Verdict:
    v = Verdict()
    for s in observed.streams:
        name = "/".join(map(str, s.stream))
        v.events_committed += s.committed
        topic_bound = s.published if s.fenced else s.committed
        missing = {p for p in range(1, topic_bound + 1) if p not in s.on_topic}
        if not s.fenced:
            missing |= set(range(s.progress + 1, s.committed + 1))
            if s.published < s.committed:
                missing |= set(range(s.published + 1, s.committed + 1))
        if missing:
            v.lost += len(missing)
            v.violations.append(f"lost: {name} positions {_ranges(sorted(missing))}")
        excess = s.inbox_doubles + (max(0, s.applied - s.committed) if not s.fenced else 0)
        if excess:
            v.doubled += excess
            v.violations.append(
                f"doubled: {name} applied {s.applied} of {s.committed} committed,"
                f" {s.inbox_doubles} positions applied under two event ids"
            )
    v.mismatched_rows = len(observed.mismatches)
    v.violations += [f"mismatch: {m}" for m in observed.mismatches[:20]]
    if observed.rows_compared == 0:
        v.violations.append("mismatch: no accepted rows to compare (nothing was written?)")
    stuck = sorted(j for j, status in observed.jobs.items() if status not in TERMINAL_JOB_STATES)
    v.stuck_jobs = len(stuck)
    if stuck:
        v.violations.append(f"stuck: {len(stuck)} capture jobs not settled: {', '.join(stuck[:5])}")
    failed = sorted(j for j, status in observed.jobs.items() if status == "failed")
    if failed:
        v.violations.append(f"failed: {len(failed)} capture jobs failed: {', '.join(failed[:5])}")
    poison = set(observed.poison)
    unexpected = [q for q in observed.quarantined if q not in poison]
    v.unexpected_quarantine = len(unexpected)
    if unexpected:
        v.violations.append(f"quarantined: {len(unexpected)} entries that were not poison")
    missing_poison = poison - set(observed.quarantined)
    if missing_poison:
        v.violations.append(f"quarantine: {len(missing_poison)} poison messages not quarantined")
    v.progress_regressions = len(seen.regressions)
    v.violations += [f"regression: {r}" for r in seen.regressions[:20]]
    v.violations += [f"exited on its own: {e}" for e in seen.exited_on_their_own]
    v.violations += [f"workload: {e}" for e in seen.workload_errors]
    if seen.rebuild_phase != "done":
        v.violations.append(f"rebuild: ended {seen.rebuild_phase or 'not recorded'}, not done")
    if not seen.fence_done:
        v.violations.append("fence: the epoch fence did not complete")
    if not seen.converged:
        v.violations.append("convergence: not reached before the deadline")
    v.violations += [
        f"rebuild lane: no worker died at {p} (the rebuilds never got there while armed)"
        for p in seen.lane_unreached
    ]
    if seen.lane_workers >= 2 and seen.lane_most_workers < 2:
        v.violations.append(
            f"rebuild lane: no rebuild lost two distinct agents workers at its crash points"
            f" (at most {seen.lane_most_workers})"
        )
    return v


def _ranges(positions: Sequence[int]) -> str:
    """``[1, 2, 3, 7]`` → ``1-3, 7`` (the first few runs)."""
    runs: list[str] = []
    start = prev = positions[0]
    for p in [*positions[1:], None]:
        if p is not None and p == prev + 1:
            prev = p
            continue
        runs.append(f"{start}-{prev}" if prev != start else str(start))
        if p is not None:
            start = prev = p
    return ", ".join(runs[:8]) + (" …" if len(runs) > 8 else "")


# Reading the stores.


def observe(
    resolver_dsn: str,
    product_dsn: str,
    kafka: KafkaSettings,
    topic: str,
    consumer: str,
    tenant_like: str,
    poison: list[bytes],
) -> Observations:
    found = Observations(poison=list(poison))
    on_topic, found.undecodable_on_topic = topic_positions(kafka, topic, tenant_like)
    with psycopg.connect(resolver_dsn, autocommit=True) as conn:
        cursors = conn.execute(
            "SELECT c.tenant_id, c.catalog_id, c.history_epoch, c.position,"
            " c.fenced_at IS NOT NULL, coalesce(p.published_position, 0)"
            " FROM stream_cursor c LEFT JOIN stream_publication p USING"
            " (tenant_id, catalog_id, history_epoch) WHERE c.tenant_id LIKE %s",
            (tenant_like,),
        ).fetchall()
        found.jobs = {
            str(j): str(s)
            for j, s in conn.execute(
                "SELECT job_id, status FROM intake_job WHERE tenant_id LIKE %s", (tenant_like,)
            ).fetchall()
        }
    with psycopg.connect(product_dsn, autocommit=True) as conn:
        progress = {
            (t, c, int(e)): (int(p), int(a))
            for t, c, e, p, a in conn.execute(
                "SELECT tenant_id, catalog_id, history_epoch, position,"
                " applied_count + ignored_count + loaded_count FROM stream_progress"
                " WHERE consumer = %s AND tenant_id LIKE %s",
                (consumer, tenant_like),
            ).fetchall()
        }
        doubles: dict[Stream, int] = {
            (t, c, int(e)): int(n)
            for t, c, e, n in conn.execute(
                "SELECT tenant_id, catalog_id, history_epoch, count(*) FROM ("
                " SELECT tenant_id, catalog_id, history_epoch, position FROM inbox"
                " WHERE consumer = %s AND tenant_id LIKE %s"
                " GROUP BY 1, 2, 3, 4 HAVING count(*) > 1) d GROUP BY 1, 2, 3",
                (consumer, tenant_like),
            ).fetchall()
        }
        found.quarantined = [
            bytes(v) if v is not None else None
            for (v,) in conn.execute(
                "SELECT value FROM quarantine WHERE consumer = %s AND status = 'open'"
                " AND (tenant_id LIKE %s OR tenant_id IS NULL)",
                (consumer, tenant_like),
            ).fetchall()
        ]
    for t, c, e, committed, fenced, published in cursors:
        stream = (str(t), str(c), int(e))
        position, applied = progress.get(stream, (0, 0))
        found.streams.append(
            StreamFacts(
                stream,
                int(committed),
                int(published),
                bool(fenced),
                frozenset(on_topic.get(stream, ())),
                position,
                applied,
                doubles.get(stream, 0),
            )
        )
    comparison = compare_serving(resolver_dsn, product_dsn, tenant_like, consumer)
    found.mismatches = [str(d) for d in comparison.differences]
    found.rows_compared = sum(comparison.rows.values())
    return found


def topic_positions(
    kafka: KafkaSettings, topic: str, tenant_like: str
) -> tuple[dict[Stream, set[int]], int]:
    """Every position of the run's streams on ``topic`` (from the beginning to the end
    each partition had when this started), and how many messages did not decode
    (either framing: the registry's when the settings name one)."""
    codec = codec_for(SchemaRegistrySettings())
    prefix = tenant_like.removesuffix("%")
    consumer = Consumer(
        kafka.client_config(
            {
                "group.id": "gapless-chaos-check",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
    )
    found: dict[Stream, set[int]] = {}
    undecodable = 0
    try:
        metadata = consumer.list_topics(topic, timeout=30).topics[topic]
        ends: dict[int, int] = {}
        assignment = []
        for partition in metadata.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
            if high > low:
                ends[partition] = high
                assignment.append(TopicPartition(topic, partition, low))
        consumer.assign(assignment)
        while ends:
            message = consumer.poll(5.0)
            if message is None:
                continue
            if message.error():
                raise RuntimeError(f"reading {topic}: {message.error()}")
            partition, offset = message.partition(), message.offset() or 0
            try:
                envelope = codec.decode_value(message.value() or b"")
            except GaplessError:
                undecodable += 1
            else:
                if envelope.tenant_id.startswith(prefix):
                    key = (envelope.tenant_id, envelope.catalog_id, envelope.history_epoch)
                    found.setdefault(key, set()).add(envelope.position)
            if partition in ends and offset + 1 >= ends[partition]:
                del ends[partition]
    finally:
        consumer.close()
    return found, undecodable
