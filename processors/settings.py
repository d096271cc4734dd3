"""Settings of the product processes (the agents, the read API) from ``GAPLESS_*``
environment variables."""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from db.settings import FencedRetentionSettings, PauseSettings
from schemas.http.settings import ApiTokenSettings
from schemas.settings import GaplessSettings, ObjectStoreSettings


class LiveConsumerSettings(GaplessSettings):
    """The live consumer: the agents record its progress under this name, and the read
    API serves the generation its progress row names (set it alike for both)."""

    agents_consumer: str = Field(
        default="product-applier",
        description="GAPLESS_AGENTS_CONSUMER: the name durable progress is recorded under.",
    )


class AgentSettings(
    PauseSettings, ObjectStoreSettings, LiveConsumerSettings, FencedRetentionSettings
):
    # The resolver token must not end up in an error message.
    model_config = SettingsConfigDict(hide_input_in_errors=True)

    agents_app_id: str = Field(
        default="gapless-product", description="GAPLESS_AGENTS_APP_ID: the consumer group."
    )
    exports_bucket: str = Field(
        default="gapless-exports",
        description="GAPLESS_EXPORTS_BUCKET: where a rebuild reads its snapshot export.",
    )
    agents_rebuild_interval_seconds: float = Field(
        default=1.0,
        gt=0,
        description="GAPLESS_AGENTS_REBUILD_INTERVAL_SECONDS: how often each unfinished"
        " rebuild is moved on by a step.",
    )
    rebuild_lease_ttl_seconds: int = Field(
        default=300,
        ge=10,
        le=86_400,
        description="GAPLESS_REBUILD_LEASE_TTL_SECONDS: a rebuild lease's time to live;"
        " renewed at every step, so it expires only when no worker carries the rebuild on.",
    )
    rebuild_max_attempts: int = Field(
        default=3,
        ge=1,
        le=20,
        description="GAPLESS_REBUILD_MAX_ATTEMPTS: new leases and exports a rebuild may"
        " start over with (its lease gone, its export failed) before it fails.",
    )
    rebuild_claim_seconds: float = Field(
        default=60.0,
        ge=2.0,
        le=3600.0,
        description="GAPLESS_REBUILD_CLAIM_SECONDS: how long a worker's claim on a rebuild"
        " lasts without renewal; after it, another worker takes the rebuild over (at once"
        " when the worker dies: its database session, which holds the rebuild's lock, ends).",
    )
    rebuild_stale_export_seconds: float = Field(
        default=120.0,
        ge=1.0,
        le=86_400.0,
        description="GAPLESS_REBUILD_STALE_EXPORT_SECONDS: an export whose writer has been"
        " quiet this long is given up and the rebuild starts over with a new one.",
    )
    rebuild_steps_per_tick: int = Field(
        default=8,
        ge=1,
        le=100,
        description="GAPLESS_REBUILD_STEPS_PER_TICK: phases a rebuild may move through in"
        " one tick of the rebuild timer while each completes at once (1: one phase per"
        " tick, so each phase lasts at least an interval).",
    )
    rebuild_catchup_max_events_per_second: float = Field(
        default=0.0,
        ge=0,
        le=1_000_000,
        description="GAPLESS_REBUILD_CATCHUP_MAX_EVENTS_PER_SECOND: events a second a"
        " rebuild's catch-up phase applies at most, so it leaves the live consumers of its"
        " process CPU (0: unthrottled); keep it well above the stream's live write rate,"
        " or the catch-up never ends (it gains on the live head only the difference).",
    )
    rebuild_load_connections: int = Field(
        default=2,
        ge=1,
        le=16,
        description="GAPLESS_REBUILD_LOAD_CONNECTIONS: export chunks a rebuild's load copies"
        " at once, each on its own database connection (PostgreSQL copies each in a backend"
        " of its own, so more than one uses more than one core; 1: one chunk at a time).",
    )
    rebuild_keep_generations: int = Field(
        default=0,
        ge=0,
        le=100,
        description="GAPLESS_REBUILD_KEEP_GENERATIONS: retired projection generations kept"
        " per catalog after a cutover (older ones are deleted in batches).",
    )
    agents_batch_size: int = Field(
        default=500, ge=1, le=10_000, description="GAPLESS_AGENTS_BATCH_SIZE: events per batch."
    )
    agents_events_consumers: int = Field(
        default=2,
        ge=1,
        le=16,
        description="GAPLESS_AGENTS_EVENTS_CONSUMERS: events-topic consumers in one agents"
        " process, each a thread with its own product-database connection, all in the"
        " process's consumer group (the topic's partitions are shared out among every"
        " consumer of every process; one beyond the partition count waits idle).",
    )
    agents_batch_within_seconds: float = Field(
        default=0.005,
        gt=0,
        le=5.0,
        description="GAPLESS_AGENTS_BATCH_WITHIN_SECONDS: how long a batch waits, after its"
        " first event, for more (a backlog fills it at once; at a low rate this is the"
        " latency it adds).",
    )
    agents_web_port: int = Field(
        default=18066,
        ge=1,
        le=65535,
        description="GAPLESS_AGENTS_WEB_PORT: /healthz, /readyz and /metrics.",
    )
    agents_web_host: str = Field(
        default="127.0.0.1",
        min_length=1,
        description="GAPLESS_AGENTS_WEB_HOST: the address the probes listen on (the image:"
        " 0.0.0.0).",
    )
    agents_retry_max_seconds: float = Field(
        default=5.0,
        gt=0,
        description="GAPLESS_AGENTS_RETRY_MAX_SECONDS: the longest pause between attempts at"
        " a batch that could not be applied (a lost connection).",
    )
    agents_session_timeout_seconds: float = Field(
        default=10.0,
        ge=6.0,
        le=300.0,
        description="GAPLESS_AGENTS_SESSION_TIMEOUT_SECONDS: how soon a dead worker's "
        "partitions are reassigned.",
    )

    resolver_url: str = Field(
        default="http://127.0.0.1:18080",
        description="GAPLESS_RESOLVER_URL: the resolver API (progress reports, retained events).",
    )
    resolver_token: SecretStr | None = Field(
        default=None, description="GAPLESS_RESOLVER_TOKEN: bearer token for the resolver API."
    )
    agents_resolver_attempts: int = Field(
        default=4,
        ge=1,
        le=20,
        description="GAPLESS_AGENTS_RESOLVER_ATTEMPTS: tries of one call to the resolver API"
        " (no answer, 5xx or 429) before the pass gives up until the next one.",
    )
    agents_resolver_retry_base_seconds: float = Field(
        default=0.25,
        gt=0,
        description="GAPLESS_AGENTS_RESOLVER_RETRY_BASE_SECONDS: the first backoff between"
        " tries (doubling, full jitter, at most 16 times this).",
    )
    agents_resolver_concurrency: int = Field(
        default=4,
        ge=1,
        le=64,
        description="GAPLESS_AGENTS_RESOLVER_CONCURRENCY: calls to the resolver API in flight"
        " from one agents process.",
    )
    agents_report_interval_seconds: float = Field(
        default=2.0, gt=0, description="GAPLESS_AGENTS_REPORT_INTERVAL_SECONDS"
    )
    agents_gap_threshold_seconds: float = Field(
        default=5.0,
        gt=0,
        description="GAPLESS_AGENTS_GAP_THRESHOLD_SECONDS: how long a gap may stay open "
        "before it is filled from the resolver's retained events.",
    )
    retention_age_seconds: float = Field(
        default=86_400.0,
        ge=0,
        description="GAPLESS_RETENTION_AGE_SECONDS: the resolver's outbox window; the"
        " agents keep inbox rows at least this long (set it as for the resolver).",
    )
    agents_inbox_prune_interval_seconds: float = Field(
        default=60.0,
        gt=0,
        description="GAPLESS_AGENTS_INBOX_PRUNE_INTERVAL_SECONDS: pause between inbox"
        " pruning passes.",
    )
    agents_inbox_prune_batch_size: int = Field(
        default=1000,
        ge=1,
        le=100_000,
        description="GAPLESS_AGENTS_INBOX_PRUNE_BATCH_SIZE: inbox rows deleted per statement.",
    )
    agents_sweep_interval_seconds: float = Field(
        default=600.0,
        gt=0,
        description="GAPLESS_AGENTS_SWEEP_INTERVAL_SECONDS: pause between sweeps of finished"
        " rebuilds, control answers, resolved quarantine entries and gone processes.",
    )
    agents_sweep_batch_size: int = Field(
        default=1000,
        ge=1,
        le=100_000,
        description="GAPLESS_AGENTS_SWEEP_BATCH_SIZE: rows a sweep deletes per statement.",
    )
    rebuild_retention_seconds: float = Field(
        default=30 * 86_400.0,
        ge=86_400.0,
        description="GAPLESS_REBUILD_RETENTION_SECONDS: a finished, cleaned-up rebuild's row"
        " and the answer to a request that was not started are kept this long; keep it"
        " above the control topic's retention (Kafka's default: 7 days), so a command"
        " delivered again always finds what became of it.",
    )
    quarantine_retention_seconds: float = Field(
        default=30 * 86_400.0,
        ge=0,
        description="GAPLESS_QUARANTINE_RETENTION_SECONDS: a quarantine entry retried,"
        " superseded or skipped is kept this long after (a skipped one naming its"
        " aggregate stays: later events of it are checked against it).",
    )
    process_retention_seconds: float = Field(
        default=7 * 86_400.0,
        ge=3_600.0,
        description="GAPLESS_PROCESS_RETENTION_SECONDS: a process not seen this long, its"
        " pause acknowledgements, and those of pauses resumed this long ago, are deleted"
        " from the control database.",
    )


class ReadApiSettings(PauseSettings, LiveConsumerSettings, ApiTokenSettings):
    """The product read API (``gapless read-api``): it reads the product database, and
    the control database for each catalog's current history epoch."""

    model_config = SettingsConfigDict(hide_input_in_errors=True)

    read_api_host: str = Field(
        default="127.0.0.1", description="GAPLESS_READ_API_HOST: the address it listens on."
    )
    read_api_port: int = Field(default=18082, ge=1, le=65535, description="GAPLESS_READ_API_PORT")
    read_api_pool_size: int = Field(
        default=8,
        ge=1,
        le=200,
        description="GAPLESS_READ_API_POOL_SIZE: product DB connections (one per read in flight).",
    )
