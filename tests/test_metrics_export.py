"""Issue 32 item 3, without Ray: how vidforge's exporter sums what its processes report, and how it shows principals.

A principal's name never becomes a label value: `all` by default, a keyed hash or the operator's mapped name when
the breakdown is asked for. The live half — a real server's endpoint, where it listens, and what a scrape after two
tenants' renders holds — is tests/test_metrics_privacy.py.
"""

from __future__ import annotations

import json
import time

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from serve_app._config import Config
from serve_app.launch._metrics_endpoint import MetricsSettingsError, load_principal_map
from serve_app.observability import metric
from serve_app.observability._reporter import KEEPALIVE_S, worth_sending
from serve_app.observability.aggregate import GAUGE_TTL_S, Aggregate, PrincipalLabels
from serve_app.observability.catalog import ALL_METRICS, QUEUE_DEPTH, RENDER_DURATION, RENDERS_CREATED


@pytest.fixture
def recording(monkeypatch):
    """This process records, with the per-tenant breakdown on (what the exporter is then told)."""
    monkeypatch.setattr(metric, "_state", metric._Recording())
    metric.enable_metrics(per_principal=True, max_principals=20)


def scrape(aggregate: Aggregate) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """The exposition prometheus_client serves of `aggregate`, parsed: sample name -> labels -> value."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(aggregate)
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def two_tenants_render() -> metric.Report:
    for principal in ("alice", "bob", "alice"):
        RENDERS_CREATED.inc(principal=metric.principal_label(principal))
    QUEUE_DEPTH.set(2, principal=metric.principal_label("alice"))
    QUEUE_DEPTH.set(1, principal=metric.principal_label("bob"))
    return metric.take_report()


def test_by_default_every_principal_is_all_and_no_name_is_served(recording):
    aggregate = Aggregate(ALL_METRICS, PrincipalLabels())
    aggregate.add("registry", two_tenants_render(), now=time.monotonic())
    samples = scrape(aggregate)
    assert samples["vidforge_renders_created_total"] == {(("principal", "all"),): 3.0}
    assert samples["vidforge_queue_depth"] == {(("principal", "all"),): 3.0}
    assert "alice" not in str(samples) and "bob" not in str(samples)


def test_hashed_labels_tell_tenants_apart_by_a_keyed_hash(recording):
    report = two_tenants_render()
    shown = []
    for key in (b"k" * 32, b"q" * 32):
        aggregate = Aggregate(ALL_METRICS, PrincipalLabels("hashed", key=key))
        aggregate.add("registry", report, now=time.monotonic())
        created = scrape(aggregate)["vidforge_renders_created_total"]
        assert sorted(created.values()) == [1.0, 2.0] and "alice" not in str(created) and "bob" not in str(created)
        labels = PrincipalLabels("hashed", key=key)
        assert created == {(("principal", labels.label("alice")),): 2.0, (("principal", labels.label("bob")),): 1.0}
        shown.append(set(created))
    assert shown[0] != shown[1]  # another key, other labels: no one without the key can compute them
    assert PrincipalLabels("hashed", key=b"k" * 32).label("other") == "other"  # the fold stays readable


def test_mapped_labels_are_the_operators_and_an_unmapped_principal_is_other(recording):
    aggregate = Aggregate(ALL_METRICS, PrincipalLabels("mapped", mapping={"alice": "acme"}))
    aggregate.add("registry", two_tenants_render(), now=time.monotonic())
    samples = scrape(aggregate)
    assert samples["vidforge_renders_created_total"] == {(("principal", "acme"),): 2.0, (("principal", "other"),): 1.0}
    assert samples["vidforge_queue_depth"] == {(("principal", "acme"),): 2.0, (("principal", "other"),): 1.0}


def test_counters_and_histograms_add_up_and_a_process_gauges_are_its_last_word(recording):
    aggregate = Aggregate(ALL_METRICS, PrincipalLabels())
    for source in ("ingress-1", "ingress-2"):
        RENDER_DURATION.observe(3.0, resolution="720p", format="mp4")
        RENDERS_CREATED.inc(principal="all")
        aggregate.add(source, metric.take_report(), now=time.monotonic())
    RENDER_DURATION.observe(100.0, resolution="720p", format="mp4")
    QUEUE_DEPTH.set(4, principal="all")
    aggregate.add("registry", metric.take_report(), now=time.monotonic())
    samples = scrape(aggregate)
    assert samples["vidforge_renders_created_total"] == {(("principal", "all"),): 2.0}
    series = (("format", "mp4"), ("resolution", "720p"))
    buckets = {
        dict(labels)["le"]: value for labels, value in samples["vidforge_render_duration_seconds_bucket"].items()
    }
    assert (buckets["1.0"], buckets["5.0"], buckets["60.0"], buckets["120.0"], buckets["+Inf"]) == (0, 2, 2, 3, 3)
    assert samples["vidforge_render_duration_seconds_count"][series] == 3
    assert samples["vidforge_render_duration_seconds_sum"][series] == 106.0

    QUEUE_DEPTH.set(1, principal="all")  # the registry, restarted by Ray, reports under its name: it replaces
    aggregate.add("registry", metric.take_report(), now=time.monotonic())
    assert scrape(aggregate)["vidforge_queue_depth"] == {(("principal", "all"),): 1.0}
    later = time.monotonic() + GAUGE_TTL_S + 1  # the registry gone without a successor: its gauges go
    assert ("vidforge_queue_depth", (("principal", "all"),)) not in aggregate.values(now=later)
    assert scrape(aggregate)["vidforge_renders_created_total"] == {(("principal", "all"),): 2.0}  # counters stay


def test_a_report_that_could_not_go_goes_with_the_next(recording):
    RENDERS_CREATED.inc(principal="all")
    metric.return_report(metric.take_report())
    RENDERS_CREATED.inc(2, principal="all")
    assert metric.take_report().counters == {("vidforge_renders_created_total", (("principal", "all"),)): 3.0}


def test_every_catalog_metric_is_served_with_its_help_before_anything_is_recorded():
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Aggregate(ALL_METRICS, PrincipalLabels()))
    exposition = generate_latest(registry).decode()
    for m in ALL_METRICS:
        assert f"# HELP {m.name} {m.help}" in exposition, m.name


def test_a_metric_recorded_with_other_labels_is_refused(recording):
    with pytest.raises(ValueError, match="principal"):
        RENDERS_CREATED.inc(tenant="alice")


@pytest.mark.parametrize(
    "content", ['["alice"]', '{"alice": ""}', '{"alice": 7}', "{not json", '{"alice": "' + "x" * 65 + '"}']
)
def test_an_unusable_principal_map_is_refused_naming_the_file(tmp_path, content):
    path = tmp_path / "labels.json"
    path.write_text(content)
    with pytest.raises(MetricsSettingsError, match="VIDFORGE_METRICS_PRINCIPAL_MAP .*labels.json"):
        load_principal_map(str(path))


def test_a_principal_map_is_read_and_mapped_needs_one(tmp_path):
    path = tmp_path / "labels.json"
    path.write_text(json.dumps({"alice": "acme", "bob": "globex"}))
    assert load_principal_map(str(path)) == {"alice": "acme", "bob": "globex"}
    with pytest.raises(MetricsSettingsError, match="missing.json"):
        load_principal_map(str(tmp_path / "missing.json"))
    with pytest.raises(ValueError, match="VIDFORGE_METRICS_PRINCIPAL_MAP"):
        Config(metrics_principals="mapped")


def test_a_process_at_rest_reports_only_what_changed_and_a_keepalive(recording):
    QUEUE_DEPTH.set(2, principal="all")
    first = metric.take_report()
    assert worth_sending(first, last_gauges=None, since_sent_s=1.0)
    repeat = metric.take_report()  # nothing recorded since: the same gauges
    assert not worth_sending(repeat, last_gauges=first.gauges, since_sent_s=1.0)
    assert worth_sending(repeat, last_gauges=first.gauges, since_sent_s=KEEPALIVE_S)  # the exporter must not forget it
    assert KEEPALIVE_S < GAUGE_TTL_S
    QUEUE_DEPTH.set(3, principal="all")
    assert worth_sending(metric.take_report(), last_gauges=first.gauges, since_sent_s=1.0)  # a gauge moved
    QUEUE_DEPTH.set(2, principal="all")
    RENDERS_CREATED.inc(principal="all")
    assert worth_sending(metric.take_report(), last_gauges=first.gauges, since_sent_s=1.0)  # an increment
