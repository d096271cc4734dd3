"""Apache Kafka 4.0 as one KRaft node (broker and controller in one JVM).

There is no reachable Kafka tarball, so the broker's jars come from Maven Central
through `infra/kafka/pom.xml` and run straight from `.local/kafka/libs`. The
storage directory is formatted once (`--standalone`, i.e. a one-voter quorum)
and reused across restarts, so topics and offsets survive `down`/`up`.

A test that puts a TCP fault proxy between the clients and the broker starts it
with a ``ProxiedListener`` as well: clients reach a broker at the address its
metadata advertises, not at the bootstrap address, so going through a proxy takes
a listener of its own advertised at the proxy's port. The PLAINTEXT listener and
every default stay as they are; without the option the extra listener is not there.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from infra.local.errors import ServiceError
from infra.local.layout import HOST, INFRA_DIR, Layout
from infra.local.ports import require_free
from infra.local.processes import (
    alive,
    log_tail,
    port_open,
    read_pid,
    require_tool,
    run,
    spawn,
    terminate,
    wait_until,
)
from infra.local.status import ServiceStatus

NAME = "kafka"
MARKER = "kafka.Kafka"  # main class on the broker's command line; see processes.alive
POM = INFRA_DIR / "kafka" / "pom.xml"
LOG4J_CONFIG = INFRA_DIR / "kafka" / "log4j2.properties"
READY_TIMEOUT = 90.0
JAVA_HINT = "install a Java 17+ runtime: sudo apt-get install -y openjdk-17-jre-headless"
MVN_HINT = "install Maven 3: sudo apt-get install -y maven"


PROXIED = "PROXIED"
"""The name of the optional listener a fault proxy forwards to."""


@dataclass(frozen=True)
class ProxiedListener:
    """A listener on ``port`` that tells clients to connect to ``advertised_port``
    (where a proxy listens and forwards to ``port``)."""

    port: int
    advertised_port: int


def bootstrap(layout: Layout) -> str:
    return f"{HOST}:{layout.kafka_port}"


def _kafka_dir(layout: Layout) -> Path:
    return layout.local / "kafka"


def _libs(layout: Layout) -> Path:
    return _kafka_dir(layout) / "libs"


def _data_dir(layout: Layout) -> Path:
    return _kafka_dir(layout) / "data"


def _config_file(layout: Layout) -> Path:
    return _kafka_dir(layout) / "server.properties"


def _stdout_log(layout: Layout) -> Path:
    # JVM crashes and anything printed before log4j starts; broker logs go to kafka.log.
    return layout.logs / "kafka.stdout.log"


def _resolve_jars(layout: Layout, echo: Callable[[str], None]) -> None:
    """Fill `.local/kafka/libs` from the pom, unless it already matches the pom.

    The directory is stamped with the pom's hash, so editing the pom (say, a
    version bump) re-resolves instead of silently running stale jars. Maven
    writes into a staging directory that replaces `libs` only on success, so an
    interrupted download is never mistaken for a complete one.
    """
    libs = _libs(layout)
    stamp = libs / ".pom.sha256"
    digest = hashlib.sha256(POM.read_bytes()).hexdigest()
    has_jars = libs.is_dir() and any(libs.glob("*.jar"))
    if has_jars and stamp.is_file() and stamp.read_text().strip() == digest:
        return
    mvn = require_tool("mvn", MVN_HINT)
    echo(f"kafka: resolving broker jars from {POM.name} with Maven (one time)")
    staging = _kafka_dir(layout) / "libs.partial"
    shutil.rmtree(staging, ignore_errors=True)
    run(
        [
            mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(POM),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime", f"-DoutputDirectory={staging}",
        ],
        what="mvn dependency:copy-dependencies",
        hint="Maven needs to reach Maven Central (or a mirror in ~/.m2/settings.xml)",
    )  # fmt: skip
    (staging / ".pom.sha256").write_text(digest + "\n")
    shutil.rmtree(libs, ignore_errors=True)
    staging.rename(libs)


def resolved_libs(layout: Layout, echo: Callable[[str], None]) -> Path:
    """The directory of the broker's jars, resolved first when they do not match the
    pom (the service images copy them in)."""
    _resolve_jars(layout, echo)
    return _libs(layout)


def server_properties(layout: Layout, proxied: ProxiedListener | None = None) -> str:
    """The broker's ``server.properties``, with the ``PROXIED`` listener if asked."""
    broker = f"{HOST}:{layout.kafka_port}"
    controller = f"{HOST}:{layout.kafka_controller_port}"
    listeners = f"PLAINTEXT://{broker},CONTROLLER://{controller}"
    advertised = listeners
    protocols = "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
    if proxied is not None:
        listeners += f",{PROXIED}://{HOST}:{proxied.port}"
        advertised += f",{PROXIED}://{HOST}:{proxied.advertised_port}"
        protocols += f",{PROXIED}:PLAINTEXT"
    return f"""\
# Written by infra/local/kafka.py on every start; edits here are overwritten.
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers={controller}
listeners={listeners}
advertised.listeners={advertised}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map={protocols}
log.dirs={_data_dir(layout)}
num.partitions=6
auto.create.topics.enable=false
# One broker: every internal topic must make do with one replica.
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
min.insync.replicas=1
# Consumers in tests should not wait 3 s for a group to settle.
group.initial.rebalance.delay.ms=0
"""


def _java_command(layout: Layout, java: str, *args: str) -> list[str]:
    return [
        java,
        "-Xms256m",
        "-Xmx512m",
        "-cp",
        f"{_libs(layout)}/*",
        f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
        f"-Dgapless.kafka.log={layout.log_file(NAME)}",
        *args,
    ]


def _format_storage(layout: Layout, java: str, echo: Callable[[str], None]) -> None:
    """Format the data directory once; meta.properties marks a formatted one."""
    data = _data_dir(layout)
    if (data / "meta.properties").is_file():
        return
    echo(f"kafka: formatting storage in {data}")
    uuid_out = run(
        _java_command(layout, java, "kafka.tools.StorageTool", "random-uuid"),
        what="kafka StorageTool random-uuid",
        hint=JAVA_HINT,
    )
    cluster_id = uuid_out.strip().splitlines()[-1].strip()
    run(
        _java_command(
            layout, java, "kafka.tools.StorageTool", "format", "--standalone",
            "-t", cluster_id, "-c", str(_config_file(layout)),
        ),
        what="kafka StorageTool format",
        hint=f"remove {data} and retry",
    )  # fmt: skip


def _admin_ready(layout: Layout) -> bool:
    # log_level 0 keeps librdkafka from printing retry chatter to our terminal.
    admin = AdminClient({"bootstrap.servers": bootstrap(layout), "log_level": 0})
    try:
        admin.list_topics(timeout=5)
    except KafkaException:
        return False
    return True


def _wait_ready(layout: Layout, running: Callable[[], bool]) -> None:
    log = layout.log_file(NAME)

    def ready() -> bool:
        if not running():
            raise ServiceError(
                f"kafka exited during start-up; last lines of {log}:\n{log_tail(log)}",
                f"see {log} and {_stdout_log(layout)}",
            )
        return port_open(HOST, layout.kafka_port) and _admin_ready(layout)

    if not wait_until(ready, timeout=READY_TIMEOUT, interval=1):
        raise ServiceError(
            f"kafka not ready on {bootstrap(layout)} after {READY_TIMEOUT:.0f}s",
            f"see {log} and {_stdout_log(layout)}",
        )


def _our_pid(layout: Layout) -> int | None:
    pid = read_pid(layout.pid_file(NAME))
    return pid if pid is not None and alive(pid, MARKER) else None


def proxied_listener(layout: Layout) -> ProxiedListener | None:
    """The proxied listener of the broker that runs now (from the configuration it
    was started with), or None: not running, or without one."""
    if _our_pid(layout) is None:
        return None
    try:
        lines = _config_file(layout).read_text().splitlines()
    except OSError:
        return None
    found: dict[str, int] = {}
    prefix = f"{PROXIED}://{HOST}:"
    for line in lines:
        key, _, value = line.partition("=")
        for entry in value.split(","):
            if key in ("listeners", "advertised.listeners") and entry.startswith(prefix):
                found[key] = int(entry.removeprefix(prefix))
    if set(found) != {"listeners", "advertised.listeners"}:
        return None
    return ProxiedListener(found["listeners"], found["advertised.listeners"])


def check_ports(layout: Layout, proxied: ProxiedListener | None = None) -> None:
    """Unless ours runs: ``PortTaken`` naming the holder if a port of the broker is taken."""
    if _our_pid(layout) is None:
        require_free(HOST, layout.kafka_port, NAME, "GAPLESS_LOCAL_KAFKA_PORT")
        controller = "GAPLESS_LOCAL_KAFKA_CONTROLLER_PORT"
        require_free(HOST, layout.kafka_controller_port, f"{NAME} controller", controller)
        if proxied is not None:
            require_free(HOST, proxied.port, f"{NAME} proxied listener", "GAPLESS_LOCAL_PROXY_PORT")


def start(
    layout: Layout, echo: Callable[[str], None], *, proxied: ProxiedListener | None = None
) -> None:
    """Start the broker unless ours already runs; wait until the AdminClient answers.

    ``proxied``: also listen on ``proxied.port``, advertised at ``proxied.advertised_port``
    (see the module's docstring). A broker already running is left as it is: see
    ``proxied_listener`` for what it has, and ``stop`` it first to change it.
    """
    address = bootstrap(layout)
    pid = _our_pid(layout)
    if pid is not None:
        echo(f"kafka: already running on {address} (pid {pid})")
        _wait_ready(layout, lambda: alive(pid, MARKER))
        return
    check_ports(layout, proxied)
    java = require_tool("java", JAVA_HINT)
    _resolve_jars(layout, echo)
    _data_dir(layout).mkdir(parents=True, exist_ok=True)
    _config_file(layout).write_text(server_properties(layout, proxied))
    _format_storage(layout, java, echo)
    extra = f", proxied {HOST}:{proxied.port}" if proxied is not None else ""
    echo(f"kafka: starting on {address} (controller {HOST}:{layout.kafka_controller_port}{extra})")
    broker = spawn(
        _java_command(layout, java, MARKER, str(_config_file(layout))),
        log=_stdout_log(layout),
        pid_file=layout.pid_file(NAME),
        cwd=_kafka_dir(layout),
    )
    _wait_ready(layout, lambda: broker.poll() is None)
    echo(f"kafka: ready on {address} (pid {broker.pid})")


def stop(layout: Layout, echo: Callable[[str], None]) -> None:
    """SIGTERM the broker gapless started (a clean KRaft shutdown), SIGKILL after 60 s."""
    pid_file = layout.pid_file(NAME)
    pid = _our_pid(layout)
    if pid is None:
        echo("kafka: not started by gapless" if not pid_file.exists() else "kafka: not running")
    else:
        echo(f"kafka: stopping (pid {pid})")
        terminate(pid, MARKER, grace=60)
    with contextlib.suppress(FileNotFoundError):
        pid_file.unlink()


def status(layout: Layout) -> ServiceStatus:
    address = bootstrap(layout)
    pid = _our_pid(layout)
    listening = port_open(HOST, layout.kafka_port)
    if pid is None:
        detail = "port open, not started by gapless" if listening else "not running"
        return ServiceStatus(NAME, listening, address, None, detail)
    if not listening:
        return ServiceStatus(NAME, False, address, pid, "process up, broker port closed")
    return ServiceStatus(NAME, True, address, pid, "started by gapless")
