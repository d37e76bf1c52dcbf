"""Metrics that add up across worker processes (``tiered-router serve --workers N``).

Each worker keeps its own :class:`~tiered_router.server._metrics.Metrics` in memory, as with
one worker, and writes a snapshot of it to ``<dir>/worker-<pid>.json`` shortly after every
change (at most one write per ``flush_interval_s``, atomically with ``os.replace``). A scrape
of ``/metrics``, answered by any one worker, flushes that worker's own numbers, then reads
every worker's file and renders the sums, the way Prometheus' multiprocess mode does:

- counters and histograms of every worker that ever ran are added up, so a worker that
  restarted does not take its counts with it;
- the ``in_flight`` gauge counts live workers only;
- ``tiered_router_workers`` says how many workers are alive.

Numbers from the other workers lag by at most ``flush_interval_s`` (50 ms by default).
``serve`` makes a fresh directory per run and sets ``TIERED_ROUTER_METRICS_DIR`` for the
workers; set it yourself to keep the files elsewhere.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tiered_router.server._metrics import Metrics, _Counter, _Histogram

if TYPE_CHECKING:
    from tiered_router.trace import Trace

__all__ = ["METRICS_DIR_ENV", "SharedMetrics", "worker_metrics"]

METRICS_DIR_ENV = "TIERED_ROUTER_METRICS_DIR"
"""Directory where each worker process writes its metrics snapshot."""

logger = logging.getLogger("tiered_router.server")

_PREFIX = "worker-"


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


class SharedMetrics(Metrics):
    """:class:`Metrics` of one worker that renders the totals of all workers.

    Args:
        directory: Where every worker writes its snapshot (shared by the workers).
        flush_interval_s: Longest a change waits before this worker writes it out.

    """

    def __init__(
        self, directory: str | os.PathLike[str], *, flush_interval_s: float = 0.05
    ) -> None:
        super().__init__()
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.pid = os.getpid()
        self.path = self.directory / f"{_PREFIX}{self.pid}.json"
        self.flush_interval_s = flush_interval_s
        self._scheduled = False
        self._write_lock = threading.Lock()
        self.flush()  # the worker counts as alive from its start

    def _series(self) -> dict[str, _Counter | _Histogram]:
        return {k: v for k, v in vars(self).items() if isinstance(v, (_Counter, _Histogram))}

    def snapshot(self) -> dict[str, Any]:
        """Return this worker's numbers as a JSON-ready dict."""
        self.collect()
        counters: dict[str, list[Any]] = {}
        histograms: dict[str, list[Any]] = {}
        for attr, series in self._series().items():
            if isinstance(series, _Counter):
                counters[attr] = [[list(k), v] for k, v in series.values.items()]
            else:
                histograms[attr] = [[list(k), list(row)] for k, row in series.series.items()]
        return {
            "pid": self.pid,
            "counters": counters,
            "histograms": histograms,
            "in_flight": self.in_flight,
        }

    def flush(self) -> None:
        """Write this worker's snapshot now."""
        self._scheduled = False
        data = json.dumps(self.snapshot(), separators=(",", ":"))
        tmp = self.path.with_suffix(".tmp")
        with self._write_lock:
            try:
                tmp.write_text(data, encoding="utf-8")
                os.replace(tmp, self.path)
            except OSError as exc:
                logger.warning("could not write worker metrics to %s: %s", self.path, exc)

    def _changed(self) -> None:
        if self._scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        self._scheduled = True
        loop.call_later(self.flush_interval_s, self.flush)

    def emit(self, trace: Trace) -> None:
        """Count one finished turn."""
        super().emit(trace)
        self._changed()

    def response(self, path: str, status: int) -> None:
        """Count one HTTP response."""
        super().response(path, status)
        self._changed()

    def close(self) -> None:
        """Write the last snapshot (at shutdown)."""
        self.flush()

    def _snapshots(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for path in sorted(self.directory.glob(f"{_PREFIX}*.json")):
            try:
                found.append(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError) as exc:  # a file being replaced or a torn copy
                logger.warning("skipping worker metrics file %s: %s", path, exc)
        return found

    def totals(self) -> tuple[Metrics, int]:
        """Return the sum over every worker's snapshot, and how many workers are alive."""
        self.flush()
        total = Metrics()
        series = {k: v for k, v in vars(total).items() if isinstance(v, (_Counter, _Histogram))}
        alive = 0
        for snap in self._snapshots():
            for attr, rows in snap.get("counters", {}).items():
                counter = series.get(attr)
                if isinstance(counter, _Counter):
                    for key, value in rows:
                        counter.inc(*key, by=float(value))
            for attr, rows in snap.get("histograms", {}).items():
                hist = series.get(attr)
                if isinstance(hist, _Histogram):
                    for key, row in rows:
                        have = hist.series.setdefault(tuple(key), [0.0] * len(row))
                        for i, value in enumerate(row):
                            have[i] += float(value)
            if _alive(int(snap.get("pid", 0))):
                alive += 1
                total.in_flight += int(snap.get("in_flight", 0))
        return total, alive

    def render(self) -> str:
        """Return the totals of every worker in the Prometheus text format."""
        total, alive = self.totals()
        return (
            total.render()
            + "# HELP tiered_router_workers Worker processes alive.\n"
            + "# TYPE tiered_router_workers gauge\n"
            + f"tiered_router_workers {alive}\n"
        )


def worker_metrics() -> Metrics:
    """Return :class:`SharedMetrics` when ``TIERED_ROUTER_METRICS_DIR`` is set, else Metrics."""
    directory = os.environ.get(METRICS_DIR_ENV)
    if directory:
        return SharedMetrics(directory)
    return Metrics()
