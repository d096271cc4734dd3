"""The probe and metrics server of the producers' processes without a web framework
of their own: the relay, the capture worker, the evidence sweeper, the pruner and the
job sweeper (the resolver API serves the same pages through FastAPI).

Three pages, each on its own, so an orchestrator can tell them apart:

* ``/healthz``, alive: the process loop goes round (a restart would help only if it
  stopped). It answers 200 from the start, also while the database is away: a
  process waiting to reconnect is alive, just not ready.
* ``/readyz``, ready: the process does its work now. What that means is each
  process's own (its ``ready`` callable; the README lists them), e.g. the relay:
  connected to its database and a pass completed lately.
* ``/metrics``: the Prometheus registry.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest


@dataclass
class Heartbeat:
    """When a process loop last went round and last finished a pass of its work.

    ``alive`` holds from the start for ``stale_after`` seconds, then as long as the
    loop goes round at least that often; ``passed_lately`` only once a pass finished
    within ``stale_after``. Thread-safe enough: floats replaced whole.
    """

    stale_after: float
    last_loop: float = field(default_factory=time.monotonic)
    last_pass: float | None = None

    def looped(self) -> None:
        self.last_loop = time.monotonic()

    def passed(self) -> None:
        self.last_pass = self.last_loop = time.monotonic()

    def alive(self) -> bool:
        return time.monotonic() - self.last_loop < self.stale_after

    def passed_lately(self) -> bool:
        return self.last_pass is not None and time.monotonic() - self.last_pass < self.stale_after


def serve(
    host: str, port: int, alive: Callable[[], bool], ready: Callable[[], bool]
) -> ThreadingHTTPServer:
    """Serve in a daemon thread on ``host:port``; returns the server to shut down."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics":
                self._reply(200, generate_latest(), CONTENT_TYPE_LATEST)
            elif self.path == "/healthz":
                ok = alive()
                self._reply(200 if ok else 503, b"ok\n" if ok else b"stalled\n", "text/plain")
            elif self.path == "/readyz":
                ok = alive() and ready()
                self._reply(200 if ok else 503, b"ready\n" if ok else b"not ready\n", "text/plain")
            else:
                self._reply(404, b"not found\n", "text/plain")

        def _reply(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return  # access logs would drown the structured ones

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True, name="probes-http").start()
    return server
