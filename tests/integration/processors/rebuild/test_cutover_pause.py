"""The cutover makes no retried call to the resolver while it holds the live
applier's pause (issue 29, defect 5), on real services.

Inside the pause each catch-up page is one call, tried once within what is left of
the pause budget. A resolver that takes the connection and never answers (the case
where retries cost the most) rolls the cutover back at once: the pause ends with
nothing changed, and the next step, with the resolver answering, cuts over. Before
the fix the pause lasted the client's four attempts of five seconds each, about
21 s, and then the error escaped.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from processors.rebuild import cutover
from processors.resolver_client import ResolverClient
from tests.integration.processors.rebuild.two_workers import LIVE, TwoWorkers


@contextmanager
def silent_resolver() -> Iterator[str]:
    """A resolver URL whose server takes connections and never answers."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        yield f"http://127.0.0.1:{server.getsockname()[1]}"


def test_a_resolver_silent_during_the_pause_ends_it_quickly_and_the_cutover_goes_on_later(
    two: TwoWorkers,
) -> None:
    two.feed_live()
    rebuild_id = two.request()
    assert two.until(two.a, rebuild_id, "cutting_over").phase == "cutting_over"
    two.write(150)
    ahead = two.feed_live()  # events the shadow has not seen: the pause must fetch them
    shadow = two.a.shadow(two.row(rebuild_id))
    assert (two.progress(shadow.consumer) or 0) < ahead
    with silent_resolver() as url:
        silent = ResolverClient(url, two.api.token)  # 5 s a call, 4 attempts
        started = time.monotonic()
        done = cutover.cut_over(
            two.settings.product_dsn,
            silent,
            shadow,
            rebuild_id,
            lambda: 1,
            page_size=40,
            pause_budget_seconds=1.0,
        )
        took = time.monotonic() - started
        silent.close()
    assert done is None  # rolled back
    assert took < 3, took
    with psycopg.connect(two.settings.product_dsn) as conn:
        # Nothing changed and nothing is held: the live row is free at once.
        live = conn.execute(
            "SELECT position, generation FROM stream_progress WHERE consumer = %s"
            " FOR UPDATE NOWAIT",
            (LIVE,),
        ).fetchall()
    assert live == [(ahead, 1)]
    assert two.row(rebuild_id).previous_generation is None
    # The resolver answers again: the next step cuts over.
    assert two.until(two.a, rebuild_id, "done").phase == "done"
    assert two.live_generation() == 2
    assert two.feed_live() == two.committed()
    two.accepted_equals(2)
