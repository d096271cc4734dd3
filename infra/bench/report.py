"""The bench's figures as one flat JSON object or a table for people."""

from __future__ import annotations

from dataclasses import dataclass

from infra.bench.agents import AgentsFigures
from infra.bench.applier import ApplierFigures
from infra.bench.capture_worker import WorkerFigures, WorkerMemory
from infra.bench.decision_cpu import DecisionCpu
from infra.bench.deployed_latency import RATES, DeployedLatency
from infra.bench.latency import LatencyFigures
from infra.bench.machine import load_line
from infra.bench.relay import RelayFigures
from infra.bench.resolver_api import ApiFigures, Round
from infra.bench.timing import Rate
from infra.bench.writer import THREADS, WriterFigures


def _ratio(ours: Rate, baseline: Rate) -> float:
    return round(ours.per_second / baseline.per_second, 3) if baseline.per_second else 0.0


def _eps(rate: Rate) -> float:
    return round(rate.per_second, 1)


@dataclass(frozen=True, slots=True)
class Figures:
    seconds: float
    environment: dict[str, object]
    writer: WriterFigures
    relay: RelayFigures
    applier: ApplierFigures
    latency: LatencyFigures
    agents: AgentsFigures
    deployed: DeployedLatency
    worker: WorkerFigures
    decision: DecisionCpu
    api: ApiFigures

    def _deployed(self) -> dict[str, object]:
        out: dict[str, object] = {}
        for rate in RATES:
            at = self.deployed.at(rate)
            n = f"{rate:.0f}"
            out[f"e2e_deployed_p50_ms_{n}"] = round(at.p50_ms, 2) if at else None
            out[f"e2e_deployed_p99_ms_{n}"] = round(at.p99_ms, 2) if at else None
            out[f"e2e_deployed_max_ms_{n}"] = round(at.max_ms, 2) if at else None
            out[f"e2e_deployed_achieved_eps_{n}"] = round(at.achieved, 1) if at else None
            out[f"e2e_deployed_relay_p99_ms_{n}"] = round(at.relay_p99_ms, 2) if at else None
            out[f"e2e_deployed_apply_p99_ms_{n}"] = round(at.apply_p99_ms, 2) if at else None
            out[f"e2e_deployed_cpu_us_per_event_{n}"] = (
                {k: round(v) for k, v in at.cpu_us_per_event.items()} if at else None
            )
            out[f"e2e_deployed_cores_{n}"] = round(at.cores, 2) if at else None
        out["e2e_deployed_max_rate_eps"] = self.deployed.max_rate
        return out

    def _worker(self) -> dict[str, object]:
        return worker_figures(self.worker)

    def as_dict(self) -> dict[str, object]:
        w, r, a, e, g = self.writer, self.relay, self.applier, self.latency, self.agents
        # The agents' ratios from the rates as printed, so a reader dividing the two
        # printed keys gets the printed ratio.
        in_process, bare, agents = _eps(a.applier), _eps(a.bare), round(g.eps, 1)
        return {
            "writer_ratio_b1": _ratio(w.gapless_b1, w.baseline_b1),
            "writer_ratio_b100": _ratio(w.gapless_b100, w.baseline_b100),
            "relay_ratio": _ratio(r.relay, r.bare),
            "applier_ratio": _ratio(a.applier, a.bare),
            "e2e_p50_ms": round(e.p50_ms, 2),
            "e2e_p99_ms": round(e.p99_ms, 2),
            "writer_threads": THREADS,
            "writer_gapless_b1_eps": _eps(w.gapless_b1),
            "writer_baseline_b1_eps": _eps(w.baseline_b1),
            "writer_baseline_b1_no_notify_eps": _eps(w.baseline_b1_no_notify),
            "writer_gapless_b100_eps": _eps(w.gapless_b100),
            "writer_baseline_b100_eps": _eps(w.baseline_b100),
            "writer_one_stream_b1_eps": _eps(w.one_stream_b1),
            "writer_one_stream_b100_eps": _eps(w.one_stream_b100),
            "writer_bulk_b100_eps": _eps(w.bare_bulk_b100),
            "writer_ratio_bulk_b100": _ratio(w.gapless_b100, w.bare_bulk_b100),
            "writer_sql_replay_b1_eps": _eps(w.sql_replay_b1),
            "writer_ratio_sql_b1": _ratio(w.gapless_b1, w.sql_replay_b1),
            "relay_mps": _eps(r.relay),
            "relay_bare_mps": _eps(r.bare),
            "relay_messages": r.relay.count,
            "relay_streams": r.streams,
            "applier_eps": _eps(a.applier),
            "applier_bare_eps": _eps(a.bare),
            "e2e_offered_eps": e.offered_per_second,
            "e2e_achieved_eps": round(e.achieved_per_second, 1),
            "e2e_events": e.events,
            "e2e_max_ms": round(e.max_ms, 2),
            "e2e_relay_p50_ms": round(e.relay_p50_ms, 2),
            "e2e_consume_apply_p50_ms": round(e.consume_apply_p50_ms, 2),
            "agents_backlog_eps": agents,
            "agents_ratio": round(agents / in_process, 3) if in_process else 0.0,
            "agents_vs_bare": round(agents / bare, 3) if bare else 0.0,
            "agents_backlog_events": g.events,
            "agents_rss_before_mb": round(g.rss_before_mb, 1),
            "agents_peak_rss_mb": round(g.peak_rss_mb, 1),
            **self._deployed(),
            **self._worker(),
            **decision_figures(self.decision),
            **api_figures(self.api),
            "seconds": self.seconds,
            **self.environment,
        }


def render_table(figures: Figures) -> str:
    d = figures.as_dict()
    env = figures.environment
    w, r, a, e, g = figures.writer, figures.relay, figures.applier, figures.latency, figures.agents
    k = figures.worker

    def row(name: str, ours: Rate, base: Rate | None, unit: str) -> str:
        if base is None:
            return f"  {name:<34} {ours.per_second:>11,.0f} {'':>11} {'':>6}  {unit}"
        return (
            f"  {name:<34} {ours.per_second:>11,.0f} {base.per_second:>11,.0f}"
            f" {_ratio(ours, base):>6.2f}  {unit}"
        )

    head = f"  {'':<34} {'gapless':>11} {'baseline':>11} {'ratio':>6}"
    lines = [
        f"gapless bench: {figures.seconds:g} s per phase, {env['cores']} cores, PostgreSQL "
        f"{env['postgres']} (synchronous_commit={env['synchronous_commit']}), "
        f"round trip {env['pg_round_trip_us']} µs, {load_line(env)}",
        "",
        f"(a) writer, {THREADS} threads on {THREADS} streams vs a sequence-numbered outbox;"
        " decisions of b items (b + 1 events)",
        head,
        row("b = 1", w.gapless_b1, w.baseline_b1, "events/s"),
        row("b = 100", w.gapless_b100, w.baseline_b100, "events/s"),
        row("baseline b = 1 without NOTIFY", w.baseline_b1_no_notify, None, "events/s"),
        row("b = 100 vs its rows written bare", w.gapless_b100, w.bare_bulk_b100, "events/s"),
        row("b = 1 vs a replay of its SQL", w.gapless_b1, w.sql_replay_b1, "events/s"),
        row(f"{THREADS} writers on one stream, b = 1", w.one_stream_b1, None, "events/s"),
        row(f"{THREADS} writers on one stream, b = 100", w.one_stream_b100, None, "events/s"),
        "",
        f"(b) relay, {r.relay.count:,} rows in {r.streams} streams vs a bare producer",
        head,
        row("Relay.run_once", r.relay, r.bare, "messages/s"),
        "",
        "(c) applier, batches of 500 vs a bare upsert of the same rows",
        head,
        row("Applier.apply", a.applier, a.bare, "events/s"),
        "",
        f"(d) end to end at {e.offered_per_second:.0f} one-item decisions/s offered "
        f"({e.achieved_per_second:.0f} achieved, {e.events:,} item events timed)",
        f"  writer COMMIT -> projection COMMIT  p50 {d['e2e_p50_ms']} ms, "
        f"p99 {d['e2e_p99_ms']} ms, max {d['e2e_max_ms']} ms",
        f"  of which COMMIT -> Kafka CreateTime p50 {d['e2e_relay_p50_ms']} ms, "
        f"CreateTime -> applied p50 {d['e2e_consume_apply_p50_ms']} ms",
        "",
        f"(e) the deployed agents (`gapless agents`) catching up {g.events:,} events",
        f"  {g.eps:>11,.0f} events/s: {d['agents_ratio']:.2f} of the in-process applier,"
        f" {d['agents_vs_bare']:.2f} of the bare upsert; RSS {g.rss_before_mb:.0f} MB,"
        f" peak {g.peak_rss_mb:.0f} MB",
        "",
        "(f) end to end through the deployed relay and agents (inbox decided_at minus"
        " outbox committed_at)",
        *[
            f"  {r.offered:>5.0f} events/s offered, {r.achieved:>6.0f} achieved:"
            f" p50 {r.p50_ms:.1f} ms, p99 {r.p99_ms:.1f} ms, max {r.max_ms:.1f} ms"
            f" (commit -> produce p99 {r.relay_p99_ms:.1f} ms, produce -> apply p99"
            f" {r.apply_p99_ms:.1f} ms)\n      CPU per event: "
            + ", ".join(f"{n} {us:,.0f} µs" for n, us in r.cpu_us_per_event.items())
            + f"; {r.cores:.2f} cores busy"
            for r in figures.deployed.rates
        ],
        f"  highest rate reached with p99 <= 100 ms: {figures.deployed.max_rate:.0f}/s",
        "",
        render_worker(k),
        "",
        render_decision(figures.decision),
        "",
        render_api(figures.api),
    ]
    return "\n".join(lines)


def worker_figures(k: WorkerFigures) -> dict[str, object]:
    """Phase (g)'s keys (``gapless bench`` and ``gapless bench worker``)."""
    return {
        "worker_products_per_s": round(k.per_second, 1),
        "worker_products": k.products,
        "worker_known_products": k.known,
        "worker_seconds": round(k.seconds, 2),
        "worker_job_s": round(k.job_seconds, 2),
        "worker_decisions": k.decisions,
        "worker_unchanged": k.outcomes.get("unchanged", 0),
        "worker_review_cases": k.review_cases,
        "worker_settle_to_applied_s": (
            None if k.settle_to_applied_s is None else round(k.settle_to_applied_s, 2)
        ),
        "worker_cpu_us_per_product": (
            None if k.cpu_us_per_product is None else round(k.cpu_us_per_product, 1)
        ),
        **_worker_memory(k),
    }


def _worker_memory(k: WorkerFigures) -> dict[str, object]:
    m = k.memory
    if m is None:
        return {}
    return {
        "worker_rss_before_mb": round(m.before_mb, 1),
        "worker_rss_10_mb": round(m.at_10_mb, 1),
        "worker_rss_90_mb": round(m.at_90_mb, 1),
        "worker_peak_rss_mb": round(m.peak_mb, 1) if m.peak_mb is not None else None,
        "worker_rss_flat": m.flat,
    }


def render_worker(k: WorkerFigures) -> str:
    """Phase (g)'s lines of the table."""
    return (
        f"(g) the deployed capture worker (`gapless resolver-worker`) settling one json-feed"
        f" capture of {k.products:,} products ({k.known:,} known to the catalog)\n"
        f"  {k.per_second:>11,.0f} products/s over {k.seconds:.1f} s (job {k.job_seconds:.1f} s):"
        f" {k.decisions:,} decisions, {k.outcomes.get('unchanged', 0):,} unchanged,"
        f" {k.review_cases:,} review cases{_render_cpu(k)}{_render_applied(k)}"
        f"{_render_memory(k.memory)}"
    )


def _render_cpu(k: WorkerFigures) -> str:
    cpu = k.cpu_us_per_product
    return "" if cpu is None else f"\n  worker CPU {cpu:,.0f} µs a product (its parse included)"


def _render_applied(k: WorkerFigures) -> str:
    if k.settle_to_applied_s is None:
        return ""
    return (
        f"\n  the deployed agents applied its last event {k.settle_to_applied_s:.2f} s"
        " after the last product settled"
    )


def _render_memory(m: WorkerMemory | None) -> str:
    if m is None:
        return ""
    peak = "not read" if m.peak_mb is None else f"{m.peak_mb:,.0f} MB"
    verdict = "flat" if m.flat else "growing"
    return (
        f"\n  worker RSS {m.before_mb:,.0f} MB before, {m.at_10_mb:,.0f} MB at a tenth,"
        f" {m.at_90_mb:,.0f} MB at nine tenths ({verdict}), peak {peak}"
    )


def decision_figures(c: DecisionCpu) -> dict[str, object]:
    """What one one-item decision costs (``decision_cpu``), and the same decision
    always under the cursor lock, with the ratios of the two."""
    figures: dict[str, object] = {
        "decision_client_cpu_us": round(c.client_us, 1),
        "decision_backend_cpu_us": None if c.backend_us is None else round(c.backend_us, 1),
        "decision_wall_us": round(c.wall_us, 1),
        "decision_cpu_decisions": c.decisions,
    }
    locked = c.locked
    if locked is not None:
        figures |= {
            "decision_locked_client_cpu_us": round(locked.client_us, 1),
            "decision_locked_backend_cpu_us": (
                None if locked.backend_us is None else round(locked.backend_us, 1)
            ),
            "decision_client_cpu_ratio": round(c.client_us / locked.client_us, 3),
            "decision_backend_cpu_ratio": (
                None
                if c.backend_us is None or not locked.backend_us
                else round(c.backend_us / locked.backend_us, 3)
            ),
        }
    return figures


def render_decision(c: DecisionCpu) -> str:
    def line(way: str, d: DecisionCpu) -> str:
        backend = "not seen" if d.backend_us is None else f"{d.backend_us:,.0f} µs"
        return (
            f"one-item decisions {way} ({d.decisions:,}): {d.wall_us:,.0f} µs each,"
            f" client CPU {d.client_us:,.0f} µs, PostgreSQL CPU {backend}"
        )

    text = line("from one thread", c)
    if c.locked is not None:
        text += "\n  " + line("always under the cursor lock", c.locked)
    return text


def _cpu(cpu_us: dict[str, float]) -> dict[str, int]:
    return {k: round(v) for k, v in cpu_us.items()}


def api_figures(f: ApiFigures) -> dict[str, object]:
    """Phase (h)'s keys (``gapless bench`` and ``gapless bench api``)."""
    return {
        "api_decisions_per_s": round(f.http.per_second, 1),
        "api_decision_p50_ms": round(f.http.p50_ms, 2),
        "api_decision_p99_ms": round(f.http.p99_ms, 2),
        "api_vs_inprocess": round(f.vs_in_process, 3),
        "inprocess_decisions_per_s": round(f.in_process.per_second, 1),
        "inprocess_decision_p99_ms": round(f.in_process.p99_ms, 2),
        "api_clients": f.clients,
        "api_processes": 1,
        "api_2_processes_decisions_per_s": round(f.http_two.per_second, 1),
        "api_2_processes_decision_p99_ms": round(f.http_two.p99_ms, 2),
        "api_cpu_us_per_decision": _cpu(f.http.cpu_us),
        "inprocess_cpu_us_per_decision": _cpu(f.in_process.cpu_us),
        "intake_captures_per_s": round(f.intake.per_second, 1),
        "intake_capture_p99_ms": round(f.intake.p99_ms, 2),
        "intake_capture_bytes": f.capture_bytes,
        "intake_cpu_us_per_capture": _cpu(f.intake.cpu_us),
    }


def render_api(f: ApiFigures) -> str:
    """Phase (h)'s lines of the table."""

    def line(name: str, r: Round) -> str:
        cpu = ", ".join(f"{k} {v:,.0f}" for k, v in r.cpu_us.items())
        return (
            f"  {name:<34} {r.per_second:>9,.0f}/s  p50 {r.p50_ms:6.1f} ms  p99 {r.p99_ms:6.1f}"
            f" ms\n      CPU µs per request: {cpu}"
        )

    return "\n".join(
        [
            f"(h) the resolver API (`gapless resolver-api`, one process) from"
            f" {f.clients} client processes, one request at a time each",
            line("decisions in process", f.in_process),
            line("decisions over HTTP", f.http),
            f"  over HTTP / in process: {f.vs_in_process:.2f}",
            line("decisions over HTTP, 2 API processes", f.http_two),
            line(f"captures posted ({f.capture_bytes:,} B)", f.intake),
        ]
    )
