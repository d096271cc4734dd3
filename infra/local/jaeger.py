"""Jaeger, the trace backend the tracing tests export to: built once from its Go
module, run on 127.0.0.1 with in-memory storage.

The binary is ``github.com/jaegertracing/jaeger/cmd/jaeger`` at ``VERSION`` (the
module's v1 tag of the Jaeger v2 release). ``go install …@VERSION`` refuses it, since
the module's ``go.mod`` has ``replace`` directives, so it is built where
``go mod download`` puts the module, with that very ``go.mod`` and ``go.sum``, into
``.local/bin/jaeger``; a stamp file beside it names the version, so a second call is a
no-op and a new ``VERSION`` rebuilds. It carries no web UI assets (those come from an
npm build of jaeger-ui): its UI page is Jaeger's placeholder, its query APIs are whole.

``start`` writes a configuration (``--config``) that binds every listener to
127.0.0.1 on ports below 32768, from the layout (``GAPLESS_LOCAL_JAEGER_*_PORT``): the
OTLP/HTTP receiver, the query API over HTTP (``/api/traces``, ``/api/v3/traces``)
and gRPC, the health check and Jaeger's own metrics. Traces live in memory until it
stops.

``python -m infra.local.jaeger`` builds it (the Makefile's ``make tracing-backend``);
``… start`` and ``… stop`` run it for a person looking at traces locally.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from infra.local.errors import ServiceError
from infra.local.layout import HOST, Layout, current_layout
from infra.local.ports import require_free
from infra.local.processes import (
    alive,
    log_tail,
    read_pid,
    require_tool,
    run,
    spawn,
    terminate,
    wait_until,
)

NAME = "jaeger"
MARKER = "jaeger --config"  # on its command line; see processes.alive
MODULE = "github.com/jaegertracing/jaeger"
PACKAGE = "./cmd/jaeger"
VERSION = "v1.75.0"
READY_TIMEOUT = 60.0
GO_HINT = "install Go (https://go.dev/doc/install, or sudo apt-get install -y golang-go)"
PROXY_HINT = "go needs to reach the Go module proxy (GOPROXY) to download Jaeger"

# Each port of the layout Jaeger listens on, and the variable that moves it.
PORTS = {
    "jaeger_otlp_port": "GAPLESS_LOCAL_JAEGER_OTLP_PORT",
    "jaeger_query_port": "GAPLESS_LOCAL_JAEGER_QUERY_PORT",
    "jaeger_query_grpc_port": "GAPLESS_LOCAL_JAEGER_QUERY_GRPC_PORT",
    "jaeger_health_port": "GAPLESS_LOCAL_JAEGER_HEALTH_PORT",
    "jaeger_metrics_port": "GAPLESS_LOCAL_JAEGER_METRICS_PORT",
}


def binary(layout: Layout) -> Path:
    return layout.bin / NAME


def stamp(layout: Layout) -> Path:
    return layout.bin / f".{NAME}-{VERSION}"


def otlp_endpoint(layout: Layout) -> str:
    """What ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set to for processes that export here."""
    return f"http://{HOST}:{layout.jaeger_otlp_port}"


def query_url(layout: Layout) -> str:
    """The query API's (and UI's) base URL."""
    return f"http://{HOST}:{layout.jaeger_query_port}"


def ensure_binary(layout: Layout, echo: Callable[[str], None]) -> Path:
    """The ``jaeger`` executable, built first if this version is not installed yet.

    1. ``go mod download -json MODULE@VERSION``: the module's source, unpacked and
       read-only in Go's module cache, with its ``go.mod`` (replace directives
       included) and ``go.sum``;
    2. ``go build`` of ``cmd/jaeger`` there, into a staging directory;
    3. move it to ``.local/bin/jaeger`` and write the version stamp.
    A failure or a crash before 3 leaves the previous binary (or none) and no stamp.
    """
    target = binary(layout)
    if stamp(layout).is_file() and target.is_file() and os.access(target, os.X_OK):
        return target
    go = require_tool("go", GO_HINT)
    echo(f"jaeger: building {MODULE}/cmd/jaeger {VERSION} (one time, about 6 minutes)")
    download = run(
        [go, "mod", "download", "-json", f"{MODULE}@{VERSION}"],
        what=f"go mod download {MODULE}@{VERSION}",
        hint=PROXY_HINT,
        timeout=600,
    )
    source = Path(json.loads(download)["Dir"])
    staging = layout.bin / ".jaeger-build"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    version_flag = f"-X {MODULE}/internal/version.latestVersion={VERSION}"
    run(
        [go, "build", "-trimpath", "-ldflags", version_flag, "-o", str(staging / NAME), PACKAGE],
        what=f"go build {MODULE}/cmd/jaeger@{VERSION}",
        hint=PROXY_HINT,
        cwd=source,
        env={**os.environ, "GOFLAGS": "-mod=readonly -buildvcs=false"},
        timeout=3600,
    )
    built = staging / NAME
    if not built.is_file():
        raise ServiceError(f"go build finished but {built} is missing", GO_HINT)
    for old in layout.bin.glob(f".{NAME}-v*"):
        old.unlink()
    built.replace(target)
    shutil.rmtree(staging, ignore_errors=True)
    stamp(layout).touch()
    return target


def config(layout: Layout) -> str:
    """Jaeger's configuration: OTLP/HTTP in, memory storage, every listener on
    127.0.0.1 at the layout's ports (JSON, which YAML reads as it is)."""
    at = f"{HOST}:"
    document = {
        "service": {
            "extensions": ["jaeger_storage", "jaeger_query", "healthcheckv2"],
            "pipelines": {
                "traces": {
                    "receivers": ["otlp"],
                    "processors": ["batch"],
                    "exporters": ["jaeger_storage_exporter"],
                }
            },
            "telemetry": {
                "resource": {"service.name": "jaeger"},
                "metrics": {
                    "level": "basic",
                    "readers": [
                        {
                            "pull": {
                                "exporter": {
                                    "prometheus": {"host": HOST, "port": layout.jaeger_metrics_port}
                                }
                            }
                        }
                    ],
                },
                "logs": {"level": "info"},
            },
        },
        "extensions": {
            "healthcheckv2": {
                "use_v2": True,
                "http": {"endpoint": f"{at}{layout.jaeger_health_port}"},
            },
            "jaeger_query": {
                "storage": {"traces": "memory"},
                "http": {"endpoint": f"{at}{layout.jaeger_query_port}"},
                "grpc": {"endpoint": f"{at}{layout.jaeger_query_grpc_port}"},
            },
            "jaeger_storage": {"backends": {"memory": {"memory": {"max_traces": 100_000}}}},
        },
        "receivers": {
            "otlp": {"protocols": {"http": {"endpoint": f"{at}{layout.jaeger_otlp_port}"}}}
        },
        "processors": {"batch": {"timeout": "200ms"}},
        "exporters": {"jaeger_storage_exporter": {"trace_storage": "memory"}},
    }
    return json.dumps(document, indent=2) + "\n"


def _state_dir(layout: Layout) -> Path:
    return layout.local / NAME


def _our_pid(layout: Layout) -> int | None:
    pid = read_pid(layout.pid_file(NAME))
    return pid if pid is not None and alive(pid, MARKER) else None


def _answers(layout: Layout) -> bool:
    """Whether the health check says ready and the query API answers."""
    for url in (
        f"http://{HOST}:{layout.jaeger_health_port}/status",
        f"{query_url(layout)}/api/services",
    ):
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status != 200:
                    return False
        except (urllib.error.URLError, OSError):
            return False
    return True


def start(layout: Layout, echo: Callable[[str], None]) -> int:
    """Start Jaeger unless ours already runs (building it first if need be); its pid
    once it answers."""
    pid = _our_pid(layout)
    if pid is not None:
        echo(f"jaeger: already running (pid {pid}), query API on {query_url(layout)}")
        return pid
    for field, variable in PORTS.items():
        require_free(HOST, getattr(layout, field), NAME, variable)
    executable = ensure_binary(layout, echo)
    state = _state_dir(layout)
    state.mkdir(parents=True, exist_ok=True)
    config_file = state / "config.yaml"
    config_file.write_text(config(layout))
    log = layout.log_file(NAME)
    echo(f"jaeger: starting, OTLP/HTTP on {otlp_endpoint(layout)}, queries on {query_url(layout)}")
    process = spawn(
        [str(executable), "--config", str(config_file)],
        log=log,
        pid_file=layout.pid_file(NAME),
        cwd=state,
    )

    def ready() -> bool:
        if process.poll() is not None:
            raise ServiceError(
                f"jaeger exited during start-up; last lines of {log}:\n{log_tail(log)}",
                f"see {log}",
            )
        return _answers(layout)

    if not wait_until(ready, timeout=READY_TIMEOUT, interval=0.2):
        terminate(process.pid, MARKER, grace=10)
        raise ServiceError(f"jaeger did not answer within {READY_TIMEOUT:.0f}s", f"see {log}")
    echo(f"jaeger: ready (pid {process.pid})")
    return process.pid


def stop(layout: Layout, echo: Callable[[str], None]) -> None:
    """SIGTERM the Jaeger gapless started (its traces go with it); SIGKILL after 15 s."""
    pid_file = layout.pid_file(NAME)
    pid = _our_pid(layout)
    if pid is None:
        echo("jaeger: not running")
    else:
        echo(f"jaeger: stopping (pid {pid})")
        terminate(pid, MARKER, grace=15)
    with contextlib.suppress(FileNotFoundError):
        pid_file.unlink()


def main(argv: list[str] | None = None) -> None:
    """``python -m infra.local.jaeger [build|start|stop]`` (build by default)."""
    args = sys.argv[1:] if argv is None else argv
    action = args[0] if args else "build"
    layout = current_layout()
    layout.ensure_dirs()
    try:
        if action == "build":
            print(ensure_binary(layout, print))
        elif action == "start":
            start(layout, print)
        elif action == "stop":
            stop(layout, print)
        else:
            raise SystemExit(
                f"usage: python -m {__spec__.name if __spec__ else __name__} [build|start|stop]"
            )
    except ServiceError as exc:
        raise SystemExit(f"error: {exc}") from exc


if __name__ == "__main__":
    main()
