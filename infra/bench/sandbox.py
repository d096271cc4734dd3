"""Databases and topics of their own for one benchmark run, removed afterwards.

The bench runs on the same PostgreSQL cluster and Kafka broker as everything else
(same durability settings, same machine), but in three databases and topics
created for the run. Sharing the real databases is not safe: the relay publishes
every stream with unpublished rows it finds, so a bench relay would ship another
process's rows to the bench topic and mark them published (and the demo's relay
would take the bench's rows), and tests truncate the shared tables. Dropping the
run's databases also removes every row the bench wrote, whatever phase failed.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from urllib.parse import quote, urlencode

import psycopg
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from db.migrate import upgrade_all
from db.settings import DatabaseSettings
from infra.config import load
from infra.topics import topic_config
from schemas.settings import KafkaSettings

Echo = Callable[[str], None]

PARTITIONS = 6
"""Partitions of each bench topic, as many as the events topic has by default."""


@dataclass(frozen=True, slots=True)
class Sandbox:
    run_id: str
    databases: DatabaseSettings
    bootstrap: str
    relay_topic: str
    e2e_topic: str
    consumer_group: str

    def tenant(self, name: str) -> str:
        """A tenant id that names the run, so its rows are recognisable anywhere."""
        return f"bench-{self.run_id}-{name}"

    def topic(self, name: str) -> str:
        """The name of one of the run's extra topics (``sandbox(extra_topics=…)``)."""
        return f"bench.{self.run_id}.{name}"


def deployed_env(box: Sandbox, events_topic: str) -> dict[str, str]:
    """The environment of a deployed process (``gapless agents``, ``relay``…) run
    against the sandbox: this one's (local services, S3 keys, tokens), pointed at
    the sandbox's databases, an events topic and its control and status topics."""
    import os

    dbs = box.databases
    return {
        **os.environ,
        "GAPLESS_RESOLVER_DSN": dbs.resolver_dsn,
        "GAPLESS_RESOLVER_MIGRATION_DSN": dbs.resolver_owner_dsn,
        "GAPLESS_PRODUCT_DSN": dbs.product_dsn,
        "GAPLESS_CONTROL_DSN": dbs.control_dsn,
        "GAPLESS_KAFKA_BOOTSTRAP": box.bootstrap,
        "GAPLESS_EVENTS_TOPIC": events_topic,
        "GAPLESS_CONTROL_TOPIC": box.topic("control"),
        "GAPLESS_REBUILD_STATUS_TOPIC": box.topic("status"),
    }


def with_dbname(dsn: str, dbname: str) -> str:
    """The same connection as ``dsn`` (URL or key=value form) to another database, as a URL.

    A URL because ``db.migrate`` hands it to SQLAlchemy.
    """
    params = {k: v for k, v in conninfo_to_dict(dsn).items() if v is not None}
    host = str(params.pop("host", ""))
    port = params.pop("port", None)
    user = params.pop("user", None)
    password = params.pop("password", None)
    params.pop("dbname", None)
    auth = ""
    if user is not None:
        auth = quote(str(user), safe="")
        if password is not None:
            auth += ":" + quote(str(password), safe="")
        auth += "@"
    netloc = auth + (f"[{host}]" if ":" in host else host) + (f":{port}" if port else "")
    query = f"?{urlencode({k: str(v) for k, v in params.items()})}" if params else ""
    return f"postgresql://{netloc}/{quote(dbname, safe='')}{query}"


@contextlib.contextmanager
def sandbox(echo: Echo, extra_topics: Mapping[str, int] | None = None) -> Iterator[Sandbox]:
    """Create the run's databases (migrated) and topics; drop them on the way out.

    ``extra_topics``: topics (name → partitions) beside the relay and end-to-end
    ones, named by ``Sandbox.topic``. Topics whose name starts with the consumer
    group's (the internal topics a Faust app under that id creates) go too."""
    shared = load(DatabaseSettings)
    kafka = load(KafkaSettings)
    run_id = uuid.uuid4().hex[:8]
    names = {db: f"gapless_bench_{run_id}_{db}" for db in ("resolver", "product", "control")}
    # The bench creates and drops databases and tables of its own, so it works as
    # the resolver's owner throughout (the services' login may do neither).
    # Both resolver DSNs are named: a GAPLESS_RESOLVER_MIGRATION_DSN in the
    # environment would otherwise point the migrations at the shared database.
    owner = with_dbname(shared.resolver_owner_dsn, names["resolver"])
    databases = DatabaseSettings(
        resolver_dsn=owner,
        resolver_migration_dsn=owner,
        product_dsn=with_dbname(shared.product_dsn, names["product"]),
        control_dsn=with_dbname(shared.control_dsn, names["control"]),
    )
    box = Sandbox(
        run_id=run_id,
        databases=databases,
        bootstrap=kafka.kafka_bootstrap,
        relay_topic=f"bench.{run_id}.relay",
        e2e_topic=f"bench.{run_id}.e2e",
        consumer_group=f"bench-{run_id}",
    )
    admin = AdminClient({"bootstrap.servers": box.bootstrap})
    created: list[str] = []
    topics: list[str] = []
    try:
        with psycopg.connect(shared.resolver_owner_dsn, autocommit=True) as conn:
            for name in names.values():
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
                created.append(name)
        echo(f"bench run {run_id}: databases {', '.join(created)}")
        upgrade_all(databases)
        wanted = {box.relay_topic: PARTITIONS, box.e2e_topic: PARTITIONS}
        wanted.update({box.topic(name): n for name, n in (extra_topics or {}).items()})
        # On a cluster (``gapless bench scale``) the run's topics are replicated as
        # the pipeline's are (``infra.topics``).
        rf, config = kafka.kafka_replication_factor, topic_config(kafka)
        new = [NewTopic(t, n, replication_factor=rf, config=config) for t, n in wanted.items()]
        for name, future in admin.create_topics(new).items():
            future.result(timeout=30)
            topics.append(name)
        yield box
    finally:
        _drop(shared.resolver_owner_dsn, created, echo)
        _delete_topics(admin, topics, box.consumer_group, echo)


def _drop(admin_dsn: str, names: list[str], echo: Echo) -> None:
    if not names:
        return
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        for name in names:
            # FORCE ends sessions a failed phase may have left open (PostgreSQL 13+).
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
    echo(f"dropped {', '.join(names)}")


def _delete_topics(admin: AdminClient, topics: list[str], group: str, echo: Echo) -> None:
    for future in admin.delete_consumer_groups([group]).values():
        with contextlib.suppress(Exception):  # the group exists only if a phase used it
            future.result(timeout=10)
    with contextlib.suppress(Exception):  # best effort: the broker may be gone
        topics = topics + [
            t for t in admin.list_topics(timeout=10).topics if t.startswith(f"{group}-")
        ]
    if not topics:
        return
    for future in admin.delete_topics(topics).values():
        future.result(timeout=30)
    echo(f"deleted topics {', '.join(topics)}")
