"""Database connection settings, read from ``GAPLESS_*`` environment variables."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from schemas.settings import GaplessSettings, KafkaSettings, SchemaRegistrySettings

if TYPE_CHECKING:
    from db.control.pauses import PauseWatch


class DatabaseSettings(GaplessSettings):
    """Where the three PostgreSQL databases live.

    The defaults point at the cluster that ``gapless up`` starts on loopback, so the
    same code runs unchanged against an external PostgreSQL when the variables are set.

    The resolver database has two logins. Its services (API, relay, pruner, sweeper,
    writers) connect with ``resolver_dsn`` as a login holding only the grants of the
    application role ``gapless_resolver_app``: no DELETE on items and decisions, no
    UPDATE on decisions (INV-05, INV-08), so not even a bug in a service can rewrite
    history. Migrations connect with ``resolver_migration_dsn`` as the owner of the
    tables, the one login that may change the schema and the grants.

    The DSNs are plain strings, not secrets: keep a password out of them (libpq reads
    it from ``PGPASSWORD`` or a password file, ``PGPASSFILE`` / ``~/.pgpass``).
    """

    resolver_dsn: str = Field(
        default="postgresql://gapless_resolver_service@127.0.0.1:15432/resolver",
        description="GAPLESS_RESOLVER_DSN: the resolver's accepted state and outbox, as"
        " the services' login (a member of gapless_resolver_app).",
    )
    resolver_migration_dsn: str | None = Field(
        default=None,
        description="GAPLESS_RESOLVER_MIGRATION_DSN: the same database as the owner of its"
        " tables, for migrations; unset: GAPLESS_RESOLVER_DSN (one login for both).",
    )
    product_dsn: str = Field(
        default="postgresql://postgres@127.0.0.1:15432/product",
        description="GAPLESS_PRODUCT_DSN: projections, inbox, parking, progress.",
    )
    control_dsn: str = Field(
        default="postgresql://postgres@127.0.0.1:15432/control",
        description="GAPLESS_CONTROL_DSN: the trusted history-epoch authority.",
    )

    @property
    def resolver_owner_dsn(self) -> str:
        """The resolver database as the owner of its tables (migrations, test set-up)."""
        return self.resolver_migration_dsn or self.resolver_dsn


FENCED_RETENTION_SECONDS = 30 * 86_400.0
"""How long a fenced history epoch's rows are kept by default: 30 days from the fence."""

MAX_FENCED_RETENTION_SECONDS = 10 * 365 * 86_400.0
"""Ten years: a longer period is a unit mistake (milliseconds given for seconds)."""


class FencedRetentionSettings(GaplessSettings):
    """How long an abandoned (fenced) history epoch is kept as history, on both sides:
    the resolver's pruner keeps its outbox rows, the agents its inbox rows (the audit
    of its deliveries) and progress. Set it alike for both."""

    fenced_retention_seconds: float = Field(
        default=FENCED_RETENTION_SECONDS,
        ge=0,
        le=MAX_FENCED_RETENTION_SECONDS,
        description="GAPLESS_FENCED_RETENTION_SECONDS: how long a fenced stream (a history"
        " epoch abandoned after a restore) is kept whole as history, from its fence; then"
        " all of it is pruned, whatever its consumers and leases say.",
    )


class PauseSettings(DatabaseSettings, KafkaSettings, SchemaRegistrySettings):
    """What a process that honours catalog pauses (``db.control.pauses``) needs: the control
    database that holds them and the control topic that announces them; and, since
    every such process writes or reads events, the schema registry."""

    pause_poll_seconds: float = Field(
        default=2.0,
        ge=0.2,
        le=60.0,
        description="GAPLESS_PAUSE_POLL_SECONDS: how often a process re-reads the catalog"
        " pauses from the control database (a PAUSE on the control topic wakes it sooner).",
    )

    def pause_watch(self, role: str) -> PauseWatch:
        """A process's watch of the catalog pauses, woken by the control topic; not
        started (``start()`` it where the process starts its work)."""
        from db.control.control_listener import listener
        from db.control.pauses import PauseWatch

        return PauseWatch(
            self.control_dsn,
            role,
            poll_seconds=self.pause_poll_seconds,
            listen=listener(self.client_config(), self.control_topic),
        )
