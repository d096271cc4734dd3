"""Kafka Connect 4.0.2 standalone with Debezium 3.6.1's PostgreSQL connector, as the
peers bench runs it: jars from Maven Central (cached under the local directory, never
in the repository), one worker JVM per start, offsets in a file.

Like the broker's launcher (``infra.local.kafka``), the jars come from a pom through
``mvn dependency:copy-dependencies`` and each directory is stamped with its pom's
hash, so a version bump re-resolves. The worker's REST port is ``free_port(28200)``
(below the ephemeral range).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from infra.bench.sandbox import Echo
from infra.local.layout import INFRA_DIR, current_layout
from infra.local.processes import require_tool, run
from infra.processes import free_port

HERE = Path(__file__).resolve().parent
WORKER_POM = HERE / "connect-pom.xml"
PLUGIN_POM = HERE / "debezium-pom.xml"
LOG4J_CONFIG = INFRA_DIR / "kafka" / "log4j2.properties"
MAIN_CLASS = "org.apache.kafka.connect.cli.ConnectStandalone"
PLUGIN = "debezium-connector-postgres"
WORKER_SUPPLIED = (
    "kafka-clients-",
    "connect-api-",
    "slf4j-api-",
    "lz4-java-",
    "snappy-java-",
    "zstd-jni-",
)
"""Jars of the plugin the worker already has: Debezium 3.6.1 is built against Kafka 4.3
and runs on connect-runtime 4.0.2 with the worker's copies (two of each conflict)."""
REST_PORT_FROM = 28200
READY_TIMEOUT_S = 120.0
JAVA_HINT = "install a Java 17+ runtime: sudo apt-get install -y openjdk-17-jre-headless"
MVN_HINT = "install Maven 3: sudo apt-get install -y maven"


def connect_dir() -> Path:
    return current_layout().local / "connect"


def _resolve(pom: Path, target: Path, echo: Echo) -> None:
    """Fill ``target`` from ``pom`` unless it already matches the pom (its stamp).

    Maven writes into a staging directory that replaces ``target`` only on success,
    so an interrupted download is never taken for a complete one."""
    stamp = target / ".pom.sha256"
    digest = hashlib.sha256(pom.read_bytes()).hexdigest()
    if target.is_dir() and stamp.is_file() and stamp.read_text().strip() == digest:
        return
    mvn = require_tool("mvn", MVN_HINT)
    echo(f"peers: resolving {pom.name} with Maven (one time)")
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    run(
        [
            mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(pom),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime", f"-DoutputDirectory={staging}",
        ],
        what=f"mvn dependency:copy-dependencies ({pom.name})",
        hint="Maven needs to reach Maven Central (or a mirror in ~/.m2/settings.xml)",
    )  # fmt: skip
    for jar in staging.glob("*.jar"):
        if target.name == PLUGIN and jar.name.startswith(WORKER_SUPPLIED):
            jar.unlink()
    (staging / ".pom.sha256").write_text(digest + "\n")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)


def resolve_jars(echo: Echo) -> tuple[Path, Path]:
    """(the worker's classpath directory, the plugin path), resolved if needed."""
    base = connect_dir()
    base.mkdir(parents=True, exist_ok=True)
    libs, plugins = base / "libs", base / "plugins"
    plugins.mkdir(exist_ok=True)
    _resolve(WORKER_POM, libs, echo)
    _resolve(PLUGIN_POM, plugins / PLUGIN, echo)
    return libs, plugins


@dataclass(frozen=True, slots=True)
class Source:
    """Where the connector reads: one database, one table, its publication and slot."""

    host: str
    port: int
    user: str
    dbname: str
    table: str
    publication: str
    slot: str


def _properties(values: dict[str, object]) -> str:
    return "".join(f"{k}={v}\n" for k, v in values.items())


@dataclass
class ConnectWorker:
    """One Connect standalone worker running the Debezium outbox connector ``name``.

    ``start`` after ``kill`` is a restart with the same offsets file and connector
    configuration: what an operator's supervisor does after a crash."""

    name: str
    bootstrap: str
    source: Source
    work_dir: Path
    log: Path
    rest_port: int = field(default_factory=lambda: free_port(REST_PORT_FROM))
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        assert self.popen is not None, "the Connect worker was not started"
        return self.popen.pid

    def _write_config(self, plugins: Path) -> tuple[Path, Path]:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        worker = self.work_dir / "worker.properties"
        worker.write_text(
            _properties(
                {
                    "bootstrap.servers": self.bootstrap,
                    "key.converter": "org.apache.kafka.connect.storage.StringConverter",
                    "value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
                    "offset.storage.file.filename": self.work_dir / "offsets",
                    # Connect's default is 60 s: a kill would re-send up to a minute.
                    "offset.flush.interval.ms": 1000,
                    "plugin.path": plugins,
                    "plugin.discovery": "service_load",
                    "listeners": f"http://127.0.0.1:{self.rest_port}",
                    "rest.advertised.host.name": "127.0.0.1",
                }
            )
        )
        s = self.source
        connector = self.work_dir / "connector.properties"
        connector.write_text(
            _properties(
                {
                    "name": self.name,
                    "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
                    "tasks.max": 1,
                    "database.hostname": s.host,
                    "database.port": s.port,
                    "database.user": s.user,
                    "database.password": "unused",  # the local cluster trusts local logins
                    "database.dbname": s.dbname,
                    "topic.prefix": self.name.replace("-", "_"),
                    "plugin.name": "pgoutput",
                    "publication.name": s.publication,
                    "publication.autocreate.mode": "disabled",
                    "slot.name": s.slot,
                    "table.include.list": f"public.{s.table}",
                    "snapshot.mode": "no_data",
                    "transforms": "outbox",
                    "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
                    "transforms.outbox.table.field.event.key": "aggregateid",
                    "transforms.outbox.route.by.field": "aggregatetype",
                    "transforms.outbox.route.topic.replacement": "${routedByValue}",
                    # Tuned as in the peers' notes (untuned it ran 3-4x slower); lz4
                    # and acks=all (Connect's default) as our relay's producer.
                    "max.batch.size": 8192,
                    "max.queue.size": 32768,
                    "poll.interval.ms": 50,
                    "producer.override.linger.ms": 5,
                    "producer.override.batch.size": 524288,
                    "producer.override.compression.type": "lz4",
                }
            )
        )
        return worker, connector

    def start(self, echo: Echo) -> None:
        java = require_tool("java", JAVA_HINT)
        libs, plugins = resolve_jars(echo)
        worker, connector = self._write_config(plugins)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as handle:
            self.popen = subprocess.Popen(
                [
                    java, "-Xms256m", "-Xmx512m", "-cp", f"{libs}/*",
                    f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
                    f"-Dgapless.kafka.log={self.log}",
                    MAIN_CLASS, str(worker), str(connector),
                ],
                stdout=handle,
                stderr=subprocess.STDOUT,
                cwd=self.work_dir,
                start_new_session=True,
            )  # fmt: skip

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def require_alive(self) -> None:
        if not self.alive():
            code = self.popen.returncode if self.popen else None
            raise RuntimeError(f"Kafka Connect exited ({code}); see {self.log}")

    def _request(self, method: str, path: str) -> dict[str, object] | None:
        url = f"http://127.0.0.1:{self.rest_port}{path}"
        request = urllib.request.Request(url, method=method)
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                body = response.read()
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise
        except (urllib.error.URLError, OSError):
            return None
        return json.loads(body) if body else {}

    def state(self) -> str | None:
        """The connector's task state (RUNNING, PAUSED, FAILED …); None if not known yet."""
        status = self._request("GET", f"/connectors/{self.name}/status")
        if not status:
            return None
        tasks = status.get("tasks")
        if not isinstance(tasks, list) or not tasks:
            return None
        task = tasks[0]
        if task.get("state") == "FAILED":
            raise RuntimeError(f"Debezium task failed: {str(task.get('trace', ''))[:2000]}")
        return str(task.get("state"))

    def wait_state(self, wanted: str, timeout: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.require_alive()
            if self.state() == wanted:
                return
            time.sleep(0.2)
        raise RuntimeError(f"the Debezium connector is not {wanted} after {timeout:.0f}s")

    def connector_state(self) -> str | None:
        """The connector's own state (RUNNING, PAUSED, STOPPED …); None if not known yet."""
        status = self._request("GET", f"/connectors/{self.name}/status")
        connector = status.get("connector") if status else None
        return str(connector.get("state")) if isinstance(connector, dict) else None

    def stop_tasks(self) -> None:
        """Connect's STOPPED state: the task is shut down, so nothing reads the slot.

        A paused task stays instantiated: Debezium's streaming thread goes on reading
        the slot into its queue (up to ``max.queue.size`` records), so the walsender
        and the JVM decode a backlog while the relay drains it, charging their CPU to
        the relay and handing Debezium a queue decoded ahead of its own drain. A
        stopped one holds no replication connection; ``resume`` starts it again from
        its stored offset in the same, warm worker."""
        self._request("PUT", f"/connectors/{self.name}/stop")
        deadline = time.monotonic() + READY_TIMEOUT_S
        while self.connector_state() != "STOPPED":
            self.require_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the Debezium connector is not STOPPED after {READY_TIMEOUT_S:.0f}s"
                )
            time.sleep(0.2)

    def resume(self) -> None:
        self._request("PUT", f"/connectors/{self.name}/resume")
        self.wait_state("RUNNING")

    def kill(self) -> None:
        """SIGKILL: a crash, with no chance to flush offsets."""
        if self.alive():
            assert self.popen is not None
            self.popen.kill()
            self.popen.wait()

    def stop(self) -> None:
        """SIGTERM (Connect stops its tasks and flushes offsets), SIGKILL after 30 s."""
        if not self.alive():
            return
        assert self.popen is not None
        self.popen.terminate()
        try:
            self.popen.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
