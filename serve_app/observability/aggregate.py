"""The exporter's view of vidforge's series: the sums of what every process reported, as Prometheus reads them.

Counters and histograms add up every process's increments (they never go back while the exporter runs: a process
that ends takes only its last second's unsent increments with it). Gauges are what each process said in its last
report, summed over the processes; a process is known by its Ray actor name where it has one (the registry, the
supervisor, each ingress replica), so a singleton restarted by Ray takes its predecessor's place at once, and a
process that has not reported for GAUGE_TTL_S (gone without a successor) is forgotten.

Principal labels are decided here, the one place that renders them (`PrincipalLabels`): by default every value is
`all`; with VIDFORGE_METRICS_PRINCIPALS=hashed a principal shows as a short keyed hash, with `mapped` as the
operator's name for it (an unmapped one as `other`). A principal's name is never a label value.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from prometheus_client import metrics_core
from prometheus_client.registry import Collector

from serve_app.observability.metric import (
    ALL_PRINCIPALS,
    OTHER_PRINCIPALS,
    HistogramCounts,
    Labels,
    Metric,
    Report,
    SeriesKey,
)

GAUGE_TTL_S = 60.0  # processes report within a second of a change, else every 15 s; one silent this long is gone
HASH_LABEL_HEX = 12  # 48 bits: tells a few hundred principals apart, and names none of them
PRINCIPAL = "principal"


@dataclass(frozen=True)
class PrincipalLabels:
    """How a principal shows on the endpoint (VIDFORGE_METRICS_PRINCIPALS): `none` (every value `all`), `hashed`
    (`t` + the first HASH_LABEL_HEX hex digits of HMAC-SHA256(key, name)), or `mapped` (the operator's name for it,
    from VIDFORGE_METRICS_PRINCIPAL_MAP; `other` when it has none)."""

    mode: Literal["none", "hashed", "mapped"] = "none"
    key: bytes = field(default=b"", repr=False)
    mapping: Mapping[str, str] = field(default_factory=dict)

    def label(self, principal: str) -> str:
        if self.mode == "none":
            return ALL_PRINCIPALS
        if principal == OTHER_PRINCIPALS:  # past VIDFORGE_METRICS_MAX_PRINCIPALS in its process
            return principal
        if self.mode == "hashed":
            return "t" + hmac.new(self.key, principal.encode(), hashlib.sha256).hexdigest()[:HASH_LABEL_HEX]
        return self.mapping.get(principal, OTHER_PRINCIPALS)


@dataclass
class _Source:
    """One reporting process's gauges, as of its last report."""

    seen: float
    gauges: dict[SeriesKey, float]


class Aggregate(Collector):
    """The sums of every process's reports; a prometheus_client collector of them (thread-safe: reports arrive on
    the exporter's threads while its HTTP server's threads scrape)."""

    def __init__(self, metrics: Iterable[Metric], principals: PrincipalLabels) -> None:
        self._metrics = {metric.name: metric for metric in metrics}
        self._principals = principals
        self._lock = threading.Lock()
        self._counters: dict[SeriesKey, float] = {}
        self._histograms: dict[SeriesKey, HistogramCounts] = {}
        self._sources: dict[str, _Source] = {}

    def add(self, source: str, report: Report, now: float) -> None:
        """Fold in one process's report, received at `now` (a monotonic clock's seconds)."""
        gauges: dict[SeriesKey, float] = {}
        for key, value in report.gauges.items():
            shown = self._shown(key)
            gauges[shown] = gauges.get(shown, 0.0) + value  # two principals mapped to one name: one series
        with self._lock:
            for key, value in report.counters.items():
                shown = self._shown(key)
                self._counters[shown] = self._counters.get(shown, 0.0) + value
            for key, counts in report.histograms.items():
                shown = self._shown(key)
                if shown in self._histograms:
                    self._histograms[shown].add(counts)
                else:
                    self._histograms[shown] = HistogramCounts(list(counts.buckets), counts.total, counts.count)
            self._sources[source] = _Source(now, gauges)

    def values(self, now: float) -> dict[SeriesKey, float]:
        """Every counter's sum and every live gauge's, by series (what `collect` shows, histograms aside)."""
        with self._lock:
            for name in [name for name, source in self._sources.items() if now - source.seen > GAUGE_TTL_S]:
                del self._sources[name]
            summed = dict(self._counters)
            for source in self._sources.values():
                for key, value in source.gauges.items():
                    summed[key] = summed.get(key, 0.0) + value
            return summed

    def collect(self) -> Iterator[metrics_core.Metric]:
        values = self.values(time.monotonic())
        with self._lock:
            histograms = {
                key: HistogramCounts(list(c.buckets), c.total, c.count) for key, c in self._histograms.items()
            }
        for metric in self._metrics.values():
            mine = sorted(item for item in (histograms if metric.kind == "histogram" else values).items())
            yield _family(metric, [(labels, value) for (name, labels), value in mine if name == metric.name])

    def _shown(self, key: SeriesKey) -> SeriesKey:
        name, labels = key
        if PRINCIPAL not in dict(labels):
            return key
        return name, tuple((k, self._principals.label(v) if k == PRINCIPAL else v) for k, v in labels)


def _family(metric: Metric, series: list[tuple[Labels, Any]]) -> metrics_core.Metric:
    """`metric`'s family with its series: (labels, a value or a histogram's counts)."""
    if metric.kind == "histogram":
        histogram = metrics_core.HistogramMetricFamily(metric.name, metric.help, labels=metric.labels)
        for labels, counts in series:
            histogram.add_metric(_values(metric, labels), _cumulative(metric.buckets, counts), counts.total)
        return histogram
    kind = metrics_core.CounterMetricFamily if metric.kind == "counter" else metrics_core.GaugeMetricFamily
    family = kind(metric.name, metric.help, labels=metric.labels)
    for labels, value in series:
        family.add_metric(_values(metric, labels), value)
    return family


def _values(metric: Metric, labels: Labels) -> list[str]:
    """A series' label values in the order of the metric's label names (the family's)."""
    by_name = dict(labels)
    return [by_name[name] for name in metric.labels]


def _cumulative(bounds: Iterable[float], counts: HistogramCounts) -> list[tuple[str, float]]:
    """Prometheus' buckets: for each upper bound, the observations at or below it, then +Inf (all of them)."""
    running, buckets = 0, []
    for bound, count in zip([*map(float, bounds), float("inf")], counts.buckets):
        running += count
        buckets.append(("+Inf" if bound == float("inf") else repr(bound), float(running)))
    return buckets
