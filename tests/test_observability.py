"""Issue 23, without Ray: the metric catalog follows Prometheus' conventions, the Grafana dashboard charts only
metrics vidforge exports (and every one of them), log lines are one JSON object each, and an error envelope's
request_id is logged exactly once however many carriers it passes. The live half — a real Prometheus scraping a real
server, and a whole run's logs — is tests/test_observability_live.py."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re

import pytest

from actors.task_registry import TaskRegistry
from mcp_protocol import errors
from mcp_protocol.domain import Failed, RenderRequest
from mcp_protocol.envelope import jsonrpc_error_data, tool_error_result
from mcp_protocol.error_codes import ErrorCode
from mcp_protocol.results import end_result
from serve_app._config import Config
from serve_app.observability import metric, registry_observer
from serve_app.observability.catalog import ALL_METRICS
from serve_app.observability.logs import JsonFormatter, log_context
from tests.harness import REPO

DASHBOARD = REPO / "deploy" / "grafana" / "vidforge.json"
EXPORTED = {m.name: m for m in ALL_METRICS}
HISTOGRAM_SERIES = ("_bucket", "_count", "_sum")


def dashboard_exprs() -> list[str]:
    def panels(items):
        for panel in items:
            yield panel
            yield from panels(panel.get("panels", []))

    return [t["expr"] for p in panels(json.loads(DASHBOARD.read_text())["panels"]) for t in p.get("targets", [])]


def test_the_catalog_follows_prometheus_conventions():
    assert len(EXPORTED) == len(ALL_METRICS), "a name is defined twice"
    for m in ALL_METRICS:
        assert re.fullmatch(r"vidforge_[a-z_]+", m.name) and m.help, m.name
        assert m.name.endswith("_total") == (m.kind == "counter"), m.name
        assert bool(m.buckets) == (m.kind == "histogram"), m.name
        assert not m.name.endswith(("_ms", "_milliseconds", "_bytes_total")), m.name  # base units
        assert list(m.buckets) == sorted(m.buckets), m.name


def test_every_dashboard_expression_names_metrics_vidforge_exports_and_labels_they_carry():
    used = set()
    for expr in dashboard_exprs():
        names = re.findall(r"\bvidforge_[a-z_]+", expr)
        assert names, expr
        for name in names:
            base = re.sub(r"_(bucket|count|sum)$", "", name) if name not in EXPORTED else name
            assert base in EXPORTED, f"{name} in {expr!r} is not a vidforge metric"
            defined = EXPORTED[base]
            assert name == base or defined.kind == "histogram", f"{name}: only histograms have {HISTOGRAM_SERIES}"
            labels = set(defined.labels) | ({"le"} if defined.kind == "histogram" else set())
            grouped = {g.strip() for by in re.findall(r"by \(([^)]*)\)", expr) for g in by.split(",")}
            selected = set(re.findall(r"([a-z_]+)=~?\"", expr))
            assert grouped | selected <= labels, f"{expr!r} uses labels {name} does not have"
            used.add(base)
    assert used == set(EXPORTED), f"not charted: {sorted(set(EXPORTED) - used)}"


def test_principals_past_the_limit_fold_into_other(monkeypatch):
    monkeypatch.setattr(metric, "_state", metric._Recording(per_principal=True, max_principals=2))
    assert [metric.principal_label(p) for p in ("a", "b", "c", "a", "d")] == ["a", "b", "other", "a", "other"]


def test_without_the_breakdown_no_principal_is_named(monkeypatch):
    monkeypatch.setattr(metric, "_state", metric._Recording(per_principal=False, max_principals=20))
    assert {metric.principal_label(p) for p in ("alice", "bob")} == {"all"}


def json_lines(logger_name: str) -> tuple[logging.Handler, io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    logging.getLogger(logger_name).addHandler(handler)
    return handler, out


def test_a_log_line_is_one_json_object_with_the_request_context_and_the_call_sites_fields():
    logger = logging.getLogger("vidforge.test")
    logger.setLevel(logging.INFO)
    handler, out = json_lines("vidforge.test")
    try:
        with log_context(principal="alice", method="tasks/get"):
            try:
                raise RuntimeError("boom")
            except RuntimeError:
                logger.exception("it failed", extra={"event": "probe", "task_id": "task_x", "wait_s": 1.5})
        logger.info("plain")
    finally:
        logging.getLogger("vidforge.test").removeHandler(handler)
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert {k: first[k] for k in ("level", "logger", "event", "message", "principal", "method", "task_id")} == {
        "level": "error",
        "logger": "vidforge.test",
        "event": "probe",
        "message": "it failed",
        "principal": "alice",
        "method": "tasks/get",
        "task_id": "task_x",
    }
    assert first["wait_s"] == 1.5 and "RuntimeError: boom" in first["exception"] and first["ts"].endswith("+00:00")
    assert second["event"] == "log" and "principal" not in second  # the context ends with its block


def test_an_error_is_logged_once_whichever_carriers_it_passes(caplog):
    caplog.set_level(logging.INFO, logger="mcp_protocol.envelope")
    error = errors.render_not_found("task_nope", 3600)
    tool_error_result(error)
    jsonrpc_error_data(error)
    error.report()
    (record,) = [r for r in caplog.records if getattr(r, "request_id", None) == error.request_id]
    assert (record.event, record.code) == ("error", "render_not_found")


def test_a_render_end_is_logged_once_by_the_registry_and_never_again_when_read(tmp_path, caplog, monkeypatch):
    """The end line carries the request_id the failed render's envelope shows on every later read."""
    monkeypatch.setattr(registry_observer, "observe_process", lambda config: None)  # no handler on pytest's root
    caplog.set_level(logging.INFO)
    config = Config(data_dir=str(tmp_path), metrics=False)

    async def run():
        registry = TaskRegistry(config.registry_settings(), observer=registry_observer.RegistryMetrics(config))
        request = RenderRequest.model_validate(
            {"source_asset_uri": "vidforge://assets/a", "output_format": "mp4", "resolution": "720p"}
        )
        task = (await registry.create("alice", request)).task
        end = Failed(code=ErrorCode.RENDER_FAILED, reason="ValueError: boom")
        return await registry.finish(task.task_id, end), end

    rec, end = asyncio.run(run())
    for _ in range(3):
        assert end_result(rec, 3600)["structuredContent"]["request_id"] == end.request_id
    (ended,) = [
        r for r in caplog.records if end.request_id in r.getMessage() or getattr(r, "request_id", "") == end.request_id
    ]
    assert (ended.event, ended.task_id, ended.principal, ended.outcome, ended.code) == (
        "render_ended",
        rec.task_id,
        "alice",
        "failed",
        "render_failed",
    )


class _Registry:
    def __init__(self, answer):
        self.answer = answer

    async def state_health(self):
        return await self.answer()


class _Store:
    def __init__(self, fails: bool):
        self.fails = fails

    def size(self, key):
        if self.fails:
            raise ConnectionError("the bucket is unreachable")
        return None


DOWN = "postgresql://db:5432/vidforge: connection refused; reconnecting"


@pytest.mark.parametrize(
    ("registry_answers", "state_down", "store_fails", "status", "body"),
    [
        (True, None, False, 200, {"status": "ready", "state": "available"}),
        (False, None, False, 503, {"status": "unready", "failing": ["registry"], "state": "unknown"}),
        (True, None, True, 503, {"status": "unready", "failing": ["media_store"], "state": "available"}),
        (
            True,
            DOWN,
            False,
            503,
            {"status": "unready", "failing": ["state"], "state": "unavailable", "state_reason": DOWN},
        ),
    ],
)
def test_readyz_names_the_part_that_fails(monkeypatch, registry_answers, state_down, store_fails, status, body):
    from starlette.applications import Starlette
    from starlette.routing import Route
    from starlette.testclient import TestClient

    from actors.held_records import StateHealth
    from serve_app.ingress import _readiness as readiness

    monkeypatch.setattr(readiness, "READY_TIMEOUT_S", 0.2)

    async def answer():
        if not registry_answers:
            await asyncio.sleep(5)  # a registry that does not answer: the check's bound ends it
        return StateHealth(available=state_down is None, reason=state_down)

    app = Starlette(routes=[Route("/readyz", readiness.Readiness(_Registry(answer), _Store(store_fails)))])
    response = TestClient(app).get("/readyz")
    assert response.status_code == status
    assert response.json() == body
