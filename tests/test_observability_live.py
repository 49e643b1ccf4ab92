"""Issue 23 with the real thing: a real Prometheus scrapes a live `vidforge serve` while it runs one watermarked
render and refuses one request, and its HTTP API answers with the values the run produced; the run's logs — the
server's output and every Ray log of its session — hold each error envelope's request_id on exactly one JSON line,
and none of the credentials the run used.

One server, one render (CI's budget): every vidforge process reports to the metrics endpoint each second and
Prometheus scrapes every second, so each value shows within seconds. The render's tenant shows as `all`: the
per-tenant breakdown is the operator's to ask for (tests/test_metrics_privacy.py).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from tests.harness import TERMINAL, ServerProcess, Wire, free_port, poll_task, upload, wait_until
from tests.media import make_clip, make_watermark_png

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
pytestmark = [
    pytest.mark.ray,
    pytest.mark.solo,
    pytest.mark.skipif(
        not Path(PROMETHEUS).exists(), reason="no prometheus binary: `apt-get install -y prometheus` (.ci/run does)"
    ),
]

TOKENS = {"tok-obs-9f3c1a7e5d": "ops"}
TOKEN = next(iter(TOKENS))
DEADLINE_S = 120


@pytest.fixture(scope="module")
def ray_tmp():
    """A short temp root of the server's own (Ray's socket paths must stay short), to read its session's logs."""
    root = Path(tempfile.mkdtemp(prefix="vfobs", dir="/tmp"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def server(tmp_path_factory, ray_tmp):
    env = {
        "RAY_TMPDIR": str(ray_tmp),
        "VIDFORGE_LOG_FORMAT": "json",
        "VIDFORGE_MAX_CONCURRENT_RENDERS": "1",  # the second create is refused: the run's refusal
        "VIDFORGE_POLL_INTERVAL_MS": "500",
    }
    with ServerProcess(tmp_path_factory.mktemp("obs") / "data", env=env, tokens=TOKENS) as proc:
        yield proc


@pytest.fixture(scope="module")
def prometheus(server, tmp_path_factory):
    """Prometheus scraping the endpoint `vidforge serve` printed, every second."""
    targets = [urlsplit(url).netloc for url in metrics_urls(server)]
    root = tmp_path_factory.mktemp("prometheus")
    (root / "prometheus.yml").write_text(
        json.dumps(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "scrape_configs": [{"job_name": "vidforge", "static_configs": [{"targets": targets}]}],
            }
        )
    )
    port = free_port()
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={root / 'prometheus.yml'}",
            f"--storage.tsdb.path={root / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(root / "prometheus.log").open("wb"),
    )
    api = f"http://127.0.0.1:{port}/api/v1"
    try:
        wait_until(lambda: _ready(api), DEADLINE_S, message="prometheus to start")
        yield api
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def metrics_urls(server: ServerProcess) -> list[str]:
    printed = re.search(r"vidforge metrics: (.*)", server.log_path.read_text())
    assert printed, "vidforge serve did not print where its metrics are"
    return re.findall(r"http://\S+/metrics", printed.group(1))


def _ready(api: str) -> bool:
    try:
        return httpx.get(f"{api}/status/buildinfo", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def query(api: str, expr: str) -> float | None:
    """The value of a PromQL expression that yields one sample, else None."""
    body = httpx.get(f"{api}/query", params={"query": expr}, timeout=10).json()
    assert body["status"] == "success", body
    results = body["data"]["result"]
    return float(results[0]["value"][1]) if len(results) == 1 else None


def shows(api: str, expr: str, value: float) -> None:
    try:
        wait_until(
            lambda: query(api, expr) == value, DEADLINE_S, interval=1, message=f"{expr} == {value} in Prometheus"
        )
    except AssertionError as err:  # say what Prometheus had instead: no scrape, no series, or other values
        raise AssertionError(f"{err}; it answered {query(api, expr)}; {scrape_report(api, expr)}") from None


def holds(api: str, expr: str, value: float, seconds: int = 6) -> None:
    """`expr` keeps `value` for `seconds`: a gauge set once stays on the endpoint (each process reports its gauges'
    values every second, and the endpoint forgets only a process that stops reporting)."""
    for _ in range(seconds):
        time.sleep(1)
        assert query(api, expr) == value, f"{expr} left {value} without a change: {scrape_report(api, expr)}"


def scrape_report(api: str, expr: str) -> str:
    """Each scrape target's health and last error, and every series of the metric `expr` is about."""
    targets = httpx.get(f"{api}/targets", timeout=10).json()["data"]["activeTargets"]
    health = [(t["scrapeUrl"], t["health"], t["lastError"]) for t in targets]
    name = re.search(r"vidforge_\w+", expr)
    series = httpx.get(f"{api}/query", params={"query": name.group(0) if name else expr}, timeout=10).json()
    return f"targets {health}; series {series['data']['result']}"


def test_a_real_prometheus_sees_the_run_and_the_logs_account_for_every_error(server, prometheus, ray_tmp, tmp_path):
    clip = make_clip(str(tmp_path / "clip.mp4"), seconds=2.0, width=320, height=180, audio=True)
    logo = make_watermark_png(str(tmp_path / "logo.png"), w=64, h=32, rgba=(255, 0, 0, 255))
    assert httpx.get(f"{server.base}/readyz", timeout=30).json() == {
        "status": "ready",
        "state": "available",
    }  # no token: a probe's
    source, watermark = upload(server, clip, TOKEN), upload(server, logo, TOKEN)
    wire = Wire(server.url, token=TOKEN, tasks=True, elicitation=True)
    args = {
        "source_asset_uri": source,
        "output_format": "mp4",
        "resolution": "720p",
        "watermark": {"image_asset_uri": watermark, "position": "bottom_right", "opacity": 0.6},
    }
    task_id = wire.tool("vidforge_render_video", args)["taskId"]
    waiting = poll_task(wire, task_id, lambda t: t["status"] == "input_required")
    capability = parse_qs(urlsplit(re.search(r"https?://\S+", waiting["statusMessage"]).group(0)).query)["cap"][0]

    # While the preview awaits its decision: the render is in the principal's queue, and a second one is refused.
    shows(prometheus, 'sum(vidforge_queue_depth{principal="all"})', 1)
    shows(prometheus, 'sum(vidforge_renders{state="input_required"})', 1)
    holds(prometheus, 'sum(vidforge_queue_depth{principal="all"})', 1)
    refused = wire.tool("vidforge_render_video", {**args, "resolution": "1080p"})
    assert refused["isError"] and refused["structuredContent"]["code"] == "render_quota_exceeded"
    shows(prometheus, 'sum(vidforge_refusals_total{limit="quota"})', 1)

    ((key, _),) = waiting["inputRequests"].items()
    wire.task("tasks/update", task_id, inputResponses={key: {"action": "accept", "content": {"approved": True}}})
    done = poll_task(wire, task_id, lambda t: t["status"] in TERMINAL)
    assert done["status"] == "completed" and not done["result"]["isError"]

    shows(prometheus, 'sum(vidforge_renders_ended_total{outcome="succeeded",code="none"})', 1)
    shows(prometheus, 'sum(vidforge_queue_depth{principal="all"})', 0)
    shows(prometheus, 'sum(vidforge_render_duration_seconds_count{resolution="720p",format="mp4"})', 1)
    assert query(prometheus, 'sum(vidforge_request_duration_seconds_count{method="tasks/get"})') >= 2
    exposition = "".join(httpx.get(url, timeout=30).text for url in metrics_urls(server))
    assert "# HELP vidforge_renders_ended_total Renders that reached a terminal status" in exposition
    assert '"ops"' not in exposition  # the tenant is `all`: its name is not the endpoint's to tell

    request_id = refused["structuredContent"]["request_id"]
    lines = _log_lines(server, ray_tmp, request_id, '"render_ended"')
    saying = [line for line in lines if request_id in line]
    assert len(saying) == 1, saying  # exactly one line says what happened
    said = json.loads(saying[0])
    assert (said["event"], said["code"], said["request_id"]) == ("error", "render_quota_exceeded", request_id)
    assert said["principal"] == "ops" and said["method"] == "tools/call"
    (ended,) = [json.loads(line) for line in lines if '"render_ended"' in line and task_id in line]
    assert (ended["outcome"], ended["principal"]) == ("succeeded", "ops") and ended["duration_s"] > 0
    for secret in (TOKEN, capability):
        assert not [line for line in lines if secret in line], "a credential reached the logs"


def _log_lines(server: ServerProcess, ray_tmp: Path, *awaited: str) -> list[str]:
    """Every line the run logged: the server's own output and every file of its Ray session's logs, once some line
    holds each of `awaited` (Ray's workers reach their files a moment after the event)."""

    def read() -> list[str] | None:
        sessions = [p for p in ray_tmp.glob("ray/session_*") if not p.is_symlink()]  # not session_latest again
        files = [server.log_path, *(p for session in sessions for p in session.glob("logs/**/*") if p.is_file())]
        lines = [line for path in files for line in path.read_text(errors="replace").splitlines()]
        return lines if all(any(text in line for line in lines) for text in awaited) else None

    return wait_until(read, DEADLINE_S, interval=0.5, message=f"log lines holding {awaited}")
