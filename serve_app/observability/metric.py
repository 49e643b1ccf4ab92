"""One vidforge metric, and what this process recorded of each since it last reported.

Why not Ray's metrics system (`ray.util.metrics`), which served these until issue 32: Ray's metrics agent serves
a node's series on its metrics export port, and Ray 2.60 binds that port on every interface whatever the node's
address (its `prometheus_exporter` listens on loopback only when the node's own IP is a loopback address, and
`ray.init`/`ray start` turn a loopback node address into the machine's): an operator can neither bind it where the
API listens nor keep vidforge's series off it. So the values are made here, in each recording process — the ingress
replicas, the RenderSupervisor, the TaskRegistry, `vidforge serve` itself — and each process sends what it recorded,
within a second of recording it (else every 15 s: serve_app/observability/_reporter.py), to one exporter actor on the
head (serve_app/observability/exporter.py), which sums them and serves them on the address and port the operator
names (VIDFORGE_METRICS_HOST / VIDFORGE_METRICS_PORT). Recording costs
a few microseconds, in-process (a dict update under a lock); nothing is sent per request.

A counter or a histogram reports its increments since the last report (the exporter keeps the sums); a gauge reports
its current value in every report, so the exporter always holds what each process says now (and forgets a process
that stops reporting, serve_app/observability/aggregate.py).

Principals: unless the operator opts into a per-tenant breakdown (VIDFORGE_METRICS_PRINCIPALS), every series carries
`principal="all"`, and no principal's name leaves the process that records. With the breakdown on, the first
VIDFORGE_METRICS_MAX_PRINCIPALS principals a process labels keep their name up to the exporter (an internal call),
which shows each as its keyed hash or its mapped name; later ones are `other` (a label's values must stay few: each
is a series Prometheus keeps).

Recording is off until the process enables it (`enable_metrics`, from `process.observe_process`): a process that
never does — a test, `vidforge assets add`, a Ray task — records nothing.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

OTHER_PRINCIPALS = "other"
ALL_PRINCIPALS = "all"  # every series' principal while the per-tenant breakdown is off

Labels = tuple[tuple[str, str], ...]  # a series' label names and values, sorted by name
SeriesKey = tuple[str, Labels]  # (metric name, labels)


@dataclass
class HistogramCounts:
    """Observations of one histogram series: a count per bucket (the last is +Inf), their sum and number."""

    buckets: list[int]
    total: float = 0.0
    count: int = 0

    def add(self, other: HistogramCounts) -> None:
        self.buckets = [mine + theirs for mine, theirs in zip(self.buckets, other.buckets)]
        self.total += other.total
        self.count += other.count


@dataclass
class Report:
    """What one process sends the exporter: counter and histogram increments since its last report, and the current
    value of every gauge it has set."""

    counters: dict[SeriesKey, float] = field(default_factory=dict)
    histograms: dict[SeriesKey, HistogramCounts] = field(default_factory=dict)
    gauges: dict[SeriesKey, float] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.counters or self.histograms or self.gauges)

    def add(self, later: Report) -> None:
        """Fold `later`'s increments into these (a report that could not be sent goes with the next one)."""
        for key, value in later.counters.items():
            self.counters[key] = self.counters.get(key, 0.0) + value
        for key, counts in later.histograms.items():
            if key in self.histograms:
                self.histograms[key].add(counts)
            else:
                self.histograms[key] = counts
        self.gauges.update(later.gauges)


@dataclass
class _Recording:
    """Whether this process records, how it labels principals, and what it recorded since its last report."""

    enabled: bool = False
    per_principal: bool = False
    max_principals: int = 0
    named: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)  # recording threads vs the reporting thread
    pending: Report = field(default_factory=Report)  # increments not reported yet
    gauges: dict[SeriesKey, float] = field(default_factory=dict)  # every gauge's value now


_state = _Recording()


def enable_metrics(per_principal: bool, max_principals: int) -> None:
    """Record from now on in this process; with `per_principal`, naming at most `max_principals` principals."""
    _state.enabled, _state.per_principal, _state.max_principals = True, per_principal, max_principals
    _state.named.clear()


def principal_label(principal: str) -> str:
    """`principal` as this process records it: `all` while the breakdown is off; else its name for the first
    VIDFORGE_METRICS_MAX_PRINCIPALS principals this process labels, and `other` for every later one."""
    if not _state.per_principal:
        return ALL_PRINCIPALS
    named = _state.named
    if principal in named:
        return principal
    if len(named) < _state.max_principals:
        named.add(principal)
        return principal
    return OTHER_PRINCIPALS


def take_report() -> Report:
    """What this process recorded since the last call, with its gauges' values now."""
    with _state.lock:
        report, _state.pending = _state.pending, Report()
        report.gauges = dict(_state.gauges)
    return report


def return_report(report: Report) -> None:
    """Put back a report that could not be sent: its increments go with the next one (its gauges are current
    anyway)."""
    with _state.lock:
        report.add(_state.pending)
        _state.pending = report
        report.gauges = {}


@dataclass
class Metric:
    """A metric's definition (what the exporter, the dashboard and its test read) and its recording."""

    name: str
    kind: Literal["counter", "gauge", "histogram"]
    help: str
    labels: tuple[str, ...] = ()
    buckets: Sequence[float] = ()  # a histogram's upper bounds, in the metric's unit

    def inc(self, value: float = 1.0, **labels: str) -> None:
        if _state.enabled:
            key = self._key(labels)
            with _state.lock:
                counters = _state.pending.counters
                counters[key] = counters.get(key, 0.0) + value

    def set(self, value: float, **labels: str) -> None:
        if _state.enabled:
            key = self._key(labels)
            with _state.lock:
                _state.gauges[key] = value

    def observe(self, value: float, **labels: str) -> None:
        if _state.enabled:
            key = self._key(labels)
            bucket = bisect.bisect_left(self.buckets, value)  # the first bound >= value; len(buckets): +Inf
            with _state.lock:
                counts = _state.pending.histograms.get(key)
                if counts is None:
                    counts = _state.pending.histograms[key] = HistogramCounts([0] * (len(self.buckets) + 1))
                counts.buckets[bucket] += 1
                counts.total += value
                counts.count += 1

    def _key(self, labels: dict[str, str]) -> SeriesKey:
        if labels.keys() != set(self.labels):
            raise ValueError(f"{self.name} has labels {self.labels}, recorded with {tuple(labels)}")
        return self.name, tuple(sorted(labels.items()))
