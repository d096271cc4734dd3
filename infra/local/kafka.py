"""Apache Kafka 4.0 as KRaft nodes: one (the default) or a cluster of three.

There is no reachable Kafka tarball, so the broker's jars come from Maven Central
through `infra/kafka/pom.xml` and run straight from `.local/kafka/libs`. Each node's
storage directory is formatted once and reused across restarts, so topics and
offsets survive `down`/`up`. A cluster's start interrupted between formatting two
nodes leaves some formatted: the next start formats the rest with the cluster id
the first ones got (``formatted_cluster_id``, from their ``meta.properties``), so all three still
form one cluster. The nodes, their ports and their configuration:
``infra.local.kafka_nodes``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from infra.local.errors import ServiceError
from infra.local.kafka_nodes import (
    NAME,
    PROXIED,
    Node,
    ProxiedListener,
    bootstrap,
    cluster_nodes,
    kafka_dir,
    nodes,
    server_properties,
    single,
)
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

__all__ = ["NAME", "ProxiedListener", "bootstrap", "server_properties"]

MARKER = "kafka.Kafka"  # main class on the broker's command line; see processes.alive
POM = INFRA_DIR / "kafka" / "pom.xml"
LOG4J_CONFIG = INFRA_DIR / "kafka" / "log4j2.properties"
READY_TIMEOUT = 90.0
JAVA_HINT = "install a Java 17+ runtime: sudo apt-get install -y openjdk-17-jre-headless"
MVN_HINT = "install Maven 3: sudo apt-get install -y maven"


def _libs(layout: Layout) -> Path:
    return kafka_dir(layout) / "libs"


def _stdout_log(layout: Layout, node: Node) -> Path:
    # JVM crashes and anything printed before log4j starts; broker logs go to <name>.log.
    return layout.logs / f"{node.name}.stdout.log"


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
    staging = kafka_dir(layout) / "libs.partial"
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


def _java_command(layout: Layout, java: str, node: Node, *args: str) -> list[str]:
    return [
        java,
        "-Xms256m",
        "-Xmx512m",
        "-cp",
        f"{_libs(layout)}/*",
        f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
        f"-Dgapless.kafka.log={layout.log_file(node.name)}",
        *args,
    ]


def _storage_tool(layout: Layout, java: str, node: Node, *args: str) -> list[str]:
    return _java_command(layout, java, node, "kafka.tools.StorageTool", *args)


def formatted_cluster_id(layout: Layout) -> str | None:
    """The cluster id a node of ``layout`` was formatted with, if any was: every node
    of a cluster must be formatted with the same, also after an interrupted start."""
    for node in nodes(layout):
        meta = node.data / "meta.properties"
        with contextlib.suppress(OSError):
            for line in meta.read_text().splitlines():
                if line.startswith("cluster.id="):
                    return line.removeprefix("cluster.id=").strip()
    return None


def _cluster_id(layout: Layout, java: str, todo: list[Node]) -> str:
    """The id formatted nodes have, else a new one."""
    found = formatted_cluster_id(layout)
    if found is not None:
        return found
    out = run(
        _storage_tool(layout, java, todo[0], "random-uuid"),
        what="kafka StorageTool random-uuid",
        hint=JAVA_HINT,
    )
    return out.strip().splitlines()[-1].strip()


def _format_storage(
    layout: Layout, node: Node, java: str, cluster_id: str, echo: Callable[[str], None]
) -> None:
    """Format the node's data directory once; meta.properties marks a formatted one.
    A single node is a one-voter quorum of its own (``--standalone``); a cluster's
    voters are in every node's configuration."""
    if (node.data / "meta.properties").is_file():
        return
    echo(f"{node.name}: formatting storage in {node.data}")
    shape = ["--standalone"] if layout.kafka_brokers == 1 else []
    run(
        _storage_tool(
            layout, java, node, "format", *shape, "-t", cluster_id, "-c", str(node.config)
        ),
        what="kafka StorageTool format",
        hint=f"remove {node.data} and retry",
    )


def _admin_ready(layout: Layout) -> bool:
    """True once the metadata lists every node as a broker."""
    # log_level 0 keeps librdkafka from printing retry chatter to our terminal.
    admin = AdminClient({"bootstrap.servers": bootstrap(layout), "log_level": 0})
    try:
        brokers = admin.list_topics(timeout=5).brokers
    except KafkaException:
        return False
    return len(brokers) == layout.kafka_brokers


def _wait_ready(layout: Layout, running: dict[Node, Callable[[], bool]]) -> None:
    def ready() -> bool:
        for node, up in running.items():
            if not up():
                log = layout.log_file(node.name)
                raise ServiceError(
                    f"{node.name} exited during start-up; last lines of {log}:\n{log_tail(log)}",
                    f"see {log} and {_stdout_log(layout, node)}",
                )
        return all(port_open(HOST, n.port) for n in running) and _admin_ready(layout)

    if not wait_until(ready, timeout=READY_TIMEOUT, interval=1):
        logs = " and ".join(str(layout.log_file(n.name)) for n in running)
        raise ServiceError(
            f"kafka not ready on {bootstrap(layout)} after {READY_TIMEOUT:.0f}s", f"see {logs}"
        )


def _pid(layout: Layout, node: Node) -> int | None:
    pid = read_pid(layout.pid_file(node.name))
    return pid if pid is not None and alive(pid, MARKER) else None


def node_pid(layout: Layout, node: Node) -> int | None:
    """The pid of ``node``'s broker when gapless started it and it runs."""
    return _pid(layout, node)


def _started_nodes(layout: Layout) -> list[Node]:
    """The nodes gapless has a pid file for, of either shape (``stop`` takes both)."""
    ids = [p.stem.removeprefix(f"{NAME}-") for p in layout.pids.glob(f"{NAME}-*.pid")]
    count = max((int(i) for i in ids if i.isdigit()), default=0)
    found = [single(layout), *cluster_nodes(layout, count)]
    return [n for n in found if layout.pid_file(n.name).exists()]


def _refuse_other_shape(layout: Layout) -> None:
    wanted = {n.name for n in nodes(layout)}
    others = [n for n in _started_nodes(layout) if n.name not in wanted and _pid(layout, n)]
    if others:
        names = ", ".join(n.name for n in others)
        raise ServiceError(
            f"{names} runs, started for another GAPLESS_LOCAL_KAFKA_BROKERS than"
            f" {layout.kafka_brokers}",
            "run `gapless down` first, then `gapless up` with the count you want",
        )


def proxied_listener(layout: Layout) -> ProxiedListener | None:
    """The proxied listener of the single broker that runs now (from the configuration
    it was started with), or None: not running, a cluster, or without one."""
    node = single(layout)
    if layout.kafka_brokers != 1 or _pid(layout, node) is None:
        return None
    try:
        lines = node.config.read_text().splitlines()
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
    """For each node not running: ``PortTaken`` naming the holder if a port of it is
    taken (a cluster's other nodes' ports move with the first's variables)."""
    for node in nodes(layout):
        if _pid(layout, node) is not None:
            continue
        shifted = "" if node.node_id == 1 else f" (node {node.node_id}: its value + stride)"
        require_free(HOST, node.port, node.name, f"GAPLESS_LOCAL_KAFKA_PORT{shifted}")
        controller = f"GAPLESS_LOCAL_KAFKA_CONTROLLER_PORT{shifted}"
        require_free(HOST, node.controller_port, f"{node.name} controller", controller)
    if proxied is not None and _pid(layout, single(layout)) is None:
        require_free(HOST, proxied.port, f"{NAME} proxied listener", "GAPLESS_LOCAL_PROXY_PORT")


def start(
    layout: Layout, echo: Callable[[str], None], *, proxied: ProxiedListener | None = None
) -> None:
    """Start every node of ``layout`` that does not run; wait until the AdminClient
    sees them all as brokers. After a node was killed this starts that node alone.

    ``proxied`` (a single broker only): also listen on ``proxied.port``, advertised at
    ``proxied.advertised_port`` (see ``infra.local.kafka_nodes``). A node already
    running is left as it is: see ``proxied_listener`` for what it has, and ``stop``
    it first to change it.
    """
    address = bootstrap(layout)
    _refuse_other_shape(layout)
    running = {n: _pid(layout, n) for n in nodes(layout)}
    todo = [n for n, pid in running.items() if pid is None]
    if not todo:
        pids = ", ".join(str(p) for p in running.values())
        echo(f"kafka: already running on {address} (pid {pids})")
        _wait_ready(layout, {n: _alive(p) for n, p in running.items()})
        return
    check_ports(layout, proxied)
    java = require_tool("java", JAVA_HINT)
    _resolve_jars(layout, echo)
    cluster_id = _cluster_id(layout, java, todo)
    for node in todo:
        node.data.mkdir(parents=True, exist_ok=True)
        node.config.write_text(server_properties(layout, node, proxied))
        _format_storage(layout, node, java, cluster_id, echo)
    checks = {n: _alive(p) for n, p in running.items() if p is not None}
    for node in todo:
        extra = f", proxied {HOST}:{proxied.port}" if proxied is not None else ""
        echo(f"{node.name}: starting on {node.address} (controller {node.controller_port}{extra})")
        broker = spawn(
            _java_command(layout, java, node, MARKER, str(node.config)),
            log=_stdout_log(layout, node),
            pid_file=layout.pid_file(node.name),
            cwd=node.home,
        )
        checks[node] = _polling(broker)
    _wait_ready(layout, checks)
    echo(f"kafka: ready on {address}")


def _alive(pid: int | None) -> Callable[[], bool]:
    return lambda: pid is not None and alive(pid, MARKER)


def _polling(process: subprocess.Popen[bytes]) -> Callable[[], bool]:
    return lambda: process.poll() is None


def kill_node(layout: Layout, node_id: int, echo: Callable[[str], None]) -> int:
    """SIGKILL node ``node_id`` (a crash: no controlled shutdown) and wait until it is
    gone; its pid. ``start`` brings it back."""
    node = next((n for n in nodes(layout) if n.node_id == node_id), None)
    pid = _pid(layout, node) if node is not None else None
    if node is None or pid is None:
        raise ServiceError(f"kafka node {node_id} is not running", "start it with `gapless up`")
    echo(f"{node.name}: SIGKILL (pid {pid})")
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not alive(pid, MARKER), timeout=30, interval=0.1)
    return pid


def stop(layout: Layout, echo: Callable[[str], None]) -> None:
    """SIGTERM every node gapless started, of either shape, at once (a clean KRaft
    shutdown; a cluster's nodes stopped one by one would wait on a lost quorum),
    SIGKILL those still up after 60 s."""
    started = _started_nodes(layout)
    if not started:
        echo("kafka: not started by gapless")
    pids = {n: _pid(layout, n) for n in started}
    for node, pid in pids.items():
        if pid is None:
            echo(f"{node.name}: not running")
            continue
        echo(f"{node.name}: stopping (pid {pid})")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    for node, pid in pids.items():
        if pid is not None:
            terminate(pid, MARKER, grace=60)
        with contextlib.suppress(FileNotFoundError):
            layout.pid_file(node.name).unlink()


def status(layout: Layout) -> list[ServiceStatus]:
    """One status per node of ``layout``."""
    return [_node_status(layout, n) for n in nodes(layout)]


def _node_status(layout: Layout, node: Node) -> ServiceStatus:
    pid = _pid(layout, node)
    listening = port_open(HOST, node.port)
    if pid is None:
        detail = "port open, not started by gapless" if listening else "not running"
        return ServiceStatus(node.name, listening, node.address, None, detail)
    if not listening:
        return ServiceStatus(node.name, False, node.address, pid, "process up, broker port closed")
    return ServiceStatus(node.name, True, node.address, pid, "started by gapless")
