"""Prometheus metrics of rewound streams, read from the control database at each scrape.

``gapless_stream_rewound`` is 1 for each stream of a catalog's current epoch whose
history went back without a fence (``db.control.epochs``: flagged by the applier on a reused
position, or by this API on a report above the committed cursor); its writes are
refused until ``gapless fence-epoch`` fences it. The alert ``GaplessStreamRewound``
fires on it. No series at all means no stream is flagged;
``gapless_stream_rewound_report_up`` says whether the flags could be read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import psycopg
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from db.control.epochs import Rewound

log = logging.getLogger(__name__)


class RewoundCollector(Collector):
    def __init__(self, read: Callable[[], list[Rewound]]) -> None:
        """``read``: the open flags now (``EpochSource.rewound_now``)."""
        self._read = read

    def collect(self) -> Iterable[Metric]:
        up = GaugeMetricFamily(
            "gapless_stream_rewound_report_up", "1 if the rewound flags could be read"
        )
        try:
            flags = self._read()
        except psycopg.Error as exc:
            log.warning("rewound-stream metrics unavailable: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        rewound = GaugeMetricFamily(
            "gapless_stream_rewound",
            "1 if the stream's history went back without a fence (writes refused until"
            " `gapless fence-epoch` fences it)",
            labels=["tenant", "catalog", "epoch", "signal"],
        )
        for flag in flags:
            rewound.add_metric(
                [flag.tenant_id, flag.catalog_id, str(flag.history_epoch), flag.signal], 1
            )
        yield rewound
