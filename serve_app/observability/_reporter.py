"""Each recording process's one reporting thread: every REPORT_INTERVAL_S, what the process recorded goes to the
exporter actor (serve_app/observability/exporter.py), in one call that nothing waits for. A process at rest, whose
report would only repeat the gauges it last sent, reports every KEEPALIVE_S instead: six processes calling the
exporter every second cost the exporter alone about 0.005 CPU-s per second on an idle server.

A report that cannot go — Ray not up yet in `vidforge serve`, which records from its start, or the exporter not
started yet — stays and goes with the next one. A process is named to the exporter by its Ray actor's name where it
has one (a singleton restarted by Ray reports under its predecessor's name), else by its node and pid.
"""

from __future__ import annotations

import os
import threading
import time

import ray

from serve_app.observability.exporter import EXPORTER, EXPORTER_NAME, ExporterClient
from serve_app.observability.metric import Report, SeriesKey, return_report, take_report

REPORT_INTERVAL_S = 1.0
KEEPALIVE_S = 15.0  # well inside the exporter's GAUGE_TTL_S, after which it forgets a silent process

_started: set[str] = set()  # the namespaces this process reports to (one, in practice)


def start_reporting(namespace: str) -> None:
    """Report this process's metrics to the namespace's exporter from now on (once per process)."""
    if namespace not in _started:
        _started.add(namespace)
        threading.Thread(target=_report_forever, args=(namespace,), name="vidforge-metrics", daemon=True).start()


def worth_sending(report: Report, last_gauges: dict[SeriesKey, float] | None, since_sent_s: float) -> bool:
    """Whether `report` says anything the exporter does not know (increments, or gauges other than `last_gauges`,
    the last sent), or KEEPALIVE_S has passed since the last report went."""
    if report.empty:
        return False
    return bool(report.counters or report.histograms) or report.gauges != last_gauges or since_sent_s >= KEEPALIVE_S


def _report_forever(namespace: str) -> None:
    exporter: ExporterClient | None = None
    source = ""
    last_gauges: dict[SeriesKey, float] | None = None
    sent_at = 0.0
    while True:
        time.sleep(REPORT_INTERVAL_S)
        if not ray.is_initialized():
            continue
        report = take_report()
        if not worth_sending(report, last_gauges, time.monotonic() - sent_at):
            continue  # nothing is lost: no increments, and the gauges are the ones sent last
        try:
            if exporter is None:
                exporter = ExporterClient(ray.get_actor(EXPORTER_NAME, namespace=namespace), EXPORTER)
                source = _source_name()
            exporter.report(source, report)
            last_gauges, sent_at = report.gauges, time.monotonic()
        except (ValueError, ray.exceptions.RayError):  # no exporter (yet), or Ray going away: next time
            exporter = None
            return_report(report)


def _source_name() -> str:
    context = ray.get_runtime_context()
    return context.get_actor_name() or f"{context.get_node_id()[:16]}:{os.getpid()}"
