"""The peers bench's figures as one flat JSON object or a table for people.

The headline keys (``relay_mps``, ``debezium_mps``, ``relay_p99_ms`` …) are batch 100
(transactions of 100 rows); the ``_b1_`` and ``_b100_`` keys give both batches.
"""

from __future__ import annotations

from dataclasses import dataclass

from infra.bench.machine import load_line
from infra.bench.peers.debezium import BATCHES, LIVE_TRANSACTIONS_PER_S, OutboxPeers
from infra.bench.timing import Rate

HEADLINE_BATCH = 100


def _ratio(ours: float, theirs: float) -> float:
    return round(ours / theirs, 3) if theirs else 0.0


@dataclass(frozen=True, slots=True)
class PeersFigures:
    rows: int
    outbox: OutboxPeers
    agents: Rate
    """One ``gapless agents`` process."""
    agents_two: Rate
    """Two of them in one consumer group, as a 2-core host would run the agents."""
    eventsourcing: Rate
    environment: dict[str, object]

    def as_dict(self) -> dict[str, object]:
        r, d = self.outbox.relay, self.outbox.debezium
        h = HEADLINE_BATCH
        # Ratios of the rates as printed, so a reader dividing the keys gets the same.
        relay, debezium = round(r.drains[h].per_second, 1), round(d.drains[h].per_second, 1)
        agents, agents_two, eventsourcing = (
            round(self.agents.per_second, 1),
            round(self.agents_two.per_second, 1),
            round(self.eventsourcing.per_second, 1),
        )
        out: dict[str, object] = {
            "relay_mps": relay,
            "debezium_mps": debezium,
            "relay_vs_debezium": _ratio(relay, debezium),
            "relay_p99_ms": r.latency[h].p99_ms,
            "debezium_p99_ms": d.latency[h].p99_ms,
            "relay_kill_duplicates": r.kill.duplicates,
            "debezium_kill_duplicates": d.kill.duplicates,
            "agents_eps": agents,
            "pyeventsourcing_eps": eventsourcing,
            "agents_vs_pyeventsourcing": _ratio(agents, eventsourcing),
            "agents_2_eps": agents_two,
            "agents_2_vs_pyeventsourcing": _ratio(agents_two, eventsourcing),
        }
        for b in BATCHES:
            out[f"relay_b{b}_mps"] = round(r.drains[b].per_second, 1)
            out[f"debezium_b{b}_mps"] = round(d.drains[b].per_second, 1)
            out[f"relay_vs_debezium_b{b}"] = _ratio(r.drains[b].per_second, d.drains[b].per_second)
            for name, side in (("relay", r), ("debezium", d)):
                out[f"{name}_b{b}_p50_ms"] = side.latency[b].p50_ms
                out[f"{name}_b{b}_p99_ms"] = side.latency[b].p99_ms
            out[f"latency_b{b}_rows"] = r.latency[b].rows
            out[f"latency_b{b}_offered_rows_per_s"] = LIVE_TRANSACTIONS_PER_S[b] * b
        for name, side in (("relay", r), ("debezium", d)):
            out[f"{name}_kill_arrived_before"] = list(side.kill.arrived_before_kills)
            out[f"{name}_kill_mid_backlog"] = side.kill.mid_backlog
        out.update(
            rows=self.rows,
            drain_rows=r.drains[h].rows,
            kill_rows=r.kill.rows,
            projection_events=self.rows,
            connect_peak_rss_mb=self.outbox.connect_peak_rss_mb,
            **self.environment,
        )
        return out


def render_peers_table(figures: PeersFigures) -> str:
    d = figures.as_dict()
    env = figures.environment
    r, z = figures.outbox.relay, figures.outbox.debezium

    def row(name: str, ours: object, theirs: object, ratio: object, unit: str) -> str:
        return f"  {name:<38} {ours!s:>11} {theirs!s:>11} {ratio!s:>7}  {unit}"

    head = f"  {'':<38} {'gapless':>11} {'peer':>11} {'ratio':>7}"
    lines = [
        f"gapless bench peers: {figures.rows:,} rows per backlog, {env['cores']} cores,"
        f" PostgreSQL {env['postgres']}, {load_line(env)}",
        "",
        "outbox: the deployed `gapless relay` vs Debezium 3.6.1's EventRouter on Kafka"
        " Connect 4.0.2 (same committed rows)",
        head,
    ]
    for b in BATCHES:
        lines.append(
            row(
                f"backlog of {r.drains[b].rows:,}, transactions of {b}",
                f"{r.drains[b].per_second:,.0f}",
                f"{z.drains[b].per_second:,.0f}",
                f"{d[f'relay_vs_debezium_b{b}']:.2f}",
                "messages/s",
            )
        )
    for b in BATCHES:
        offered = d[f"latency_b{b}_offered_rows_per_s"]
        lines.append(
            row(
                f"commit -> Kafka, batch {b} ({offered:g} rows/s) p50",
                r.latency[b].p50_ms,
                z.latency[b].p50_ms,
                "",
                "ms",
            )
        )
        lines.append(row("  p99", r.latency[b].p99_ms, z.latency[b].p99_ms, "", "ms"))
    lines += [
        row(
            f"duplicates after {len(r.kill.arrived_before_kills)} kills -9 ({r.kill.rows:,} rows)",
            f"{r.kill.duplicates:,}",
            f"{z.kill.duplicates:,}",
            "",
            "messages",
        ),
        row(
            "  rows out at each kill",
            " / ".join(f"{n:,}" for n in r.kill.arrived_before_kills),
            " / ".join(f"{n:,}" for n in z.kill.arrived_before_kills),
            "",
            "",
        ),
        f"  Kafka Connect peak RSS {figures.outbox.connect_peak_rss_mb:,.0f} MB",
        "",
        f"projection: the deployed `gapless agents` vs pyeventsourcing 9.5.6's"
        f" ProjectionRunner ({figures.rows:,} events)",
        head,
        row(
            "catching up a backlog, one process",
            f"{figures.agents.per_second:,.0f}",
            f"{figures.eventsourcing.per_second:,.0f}",
            f"{d['agents_vs_pyeventsourcing']:.2f}",
            "events/s",
        ),
        row(
            "  two processes, one group",
            f"{figures.agents_two.per_second:,.0f}",
            f"{figures.eventsourcing.per_second:,.0f}",
            f"{d['agents_2_vs_pyeventsourcing']:.2f}",
            "events/s",
        ),
    ]
    return "\n".join(lines)
