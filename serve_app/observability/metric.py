"""One vidforge metric, recorded through Ray's metrics system (`ray.util.metrics`).

Why Ray's and not a `prometheus_client` endpoint on the ingress: the values are made in several processes — the
ingress replicas, the RenderSupervisor, the TaskRegistry — and the replicas of a node share one port
(serve_app/ingress/front.py), so a scrape of vidforge's own port would reach one replica at random. Ray's metrics
agent on every node collects what each process records (every `RAY_metrics_report_interval_ms`, 10 s by default)
and serves it on the node's Prometheus endpoint (`/metrics` on its metrics export port) beside Ray's own metrics,
under `ray_` + the name given here, one series per recording process (label `WorkerId`): sum them in queries.
Recording costs about 2 µs, in-process; nothing is sent per request.

A gauge's value holds until it is set again: Ray's agent drops a gauge series that its process has not reported
for two report intervals (ray/_private/telemetry/open_telemetry_metric_recorder.py), and a process reports only
what it recorded since its last report, so a gauge set once (a render waiting an hour for approval) would vanish
from the endpoint seconds later. Each recording process re-records its gauges' last values every second
(`GAUGE_REFRESH_S`, the floor of Ray's report interval) from one daemon thread.

Recording is off until the process enables it (`enable_metrics`, from `process.observe_process`): a process that
never does — a test, `vidforge assets add`, a Ray task — records nothing and creates no Ray metric. The Ray metric
objects are made on first use, in the process that records.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ray.util import metrics as ray_metrics

OTHER_PRINCIPALS = "other"
GAUGE_REFRESH_S = 1.0  # Ray reports at most once a second (its report interval's floor)


@dataclass
class _Recording:
    """Whether this process records, and the principals its labels name (the rest fold into `other`)."""

    enabled: bool = False
    max_principals: int = 0
    named: set[str] = field(default_factory=set)
    gauges: list[Metric] = field(default_factory=list)  # every gauge this process has set
    refresher: threading.Thread | None = None


_state = _Recording()


def enable_metrics(max_principals: int) -> None:
    """Record from now on in this process, naming at most `max_principals` principals in labels."""
    _state.enabled, _state.max_principals = True, max_principals
    _state.named.clear()
    if _state.refresher is None:
        _state.refresher = threading.Thread(target=_refresh_gauges, name="vidforge-gauges", daemon=True)
        _state.refresher.start()


def _refresh_gauges() -> None:
    """Re-record every gauge's last values, forever (see the module's docstring for why)."""
    while True:
        time.sleep(GAUGE_REFRESH_S)
        for gauge in list(_state.gauges):
            gauge.rerecord()


def principal_label(principal: str) -> str:
    """`principal` as a label value: the first VIDFORGE_METRICS_MAX_PRINCIPALS principals this process labels keep
    their name, every later one is `other` (a label's values must stay few: each is a series Prometheus keeps)."""
    named = _state.named
    if principal in named:
        return principal
    if len(named) < _state.max_principals:
        named.add(principal)
        return principal
    return OTHER_PRINCIPALS


@dataclass
class Metric:
    """A metric's definition (what the dashboard and its test read) and its recorder in this process."""

    name: str
    kind: Literal["counter", "gauge", "histogram"]
    help: str
    labels: tuple[str, ...] = ()
    buckets: Sequence[float] = ()  # a histogram's upper bounds, in the metric's unit
    _recorder: Any = field(default=None, init=False, repr=False)
    _held: dict[tuple[tuple[str, str], ...], float] = field(default_factory=dict, init=False, repr=False)

    @property
    def exported_name(self) -> str:
        """The name on a node's Prometheus endpoint: Ray prefixes every application metric with `ray_`."""
        return f"ray_{self.name}"

    def inc(self, value: float = 1.0, **labels: str) -> None:
        if (recorder := self._ready()) is not None:
            recorder.inc(value, tags=labels)

    def set(self, value: float, **labels: str) -> None:
        if (recorder := self._ready()) is not None:
            recorder.set(value, tags=labels)
            self._held[tuple(sorted(labels.items()))] = value

    def rerecord(self) -> None:
        """Record a gauge's last value of each label set again, so that Ray keeps reporting it."""
        for labels, value in self._held.copy().items():  # a copy: the owner's thread may set meanwhile
            self._recorder.set(value, tags=dict(labels))

    def observe(self, value: float, **labels: str) -> None:
        if (recorder := self._ready()) is not None:
            recorder.observe(value, tags=labels)

    def _ready(self) -> Any:
        if not _state.enabled:
            return None
        if self._recorder is None:
            if self.kind == "counter":
                self._recorder = ray_metrics.Counter(self.name, self.help, tag_keys=self.labels)
            elif self.kind == "gauge":
                self._recorder = ray_metrics.Gauge(self.name, self.help, tag_keys=self.labels)
                _state.gauges.append(self)
            else:
                self._recorder = ray_metrics.Histogram(self.name, self.help, list(self.buckets), tag_keys=self.labels)
        return self._recorder
