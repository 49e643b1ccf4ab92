"""A finished video's quality check where people look at it: the watch page and the review page (the verdict, its
reasons and the contact sheet, each page's sheet through its own capability; nothing of it, and no broken image, for a
video without a check or a sheet), `vidforge render` (the verdict printed, the sheet written beside the video) and
`vidforge renders get` (the verdict, reasons, loudness and fidelity).

In-process (tests/fast_wire.py): the pages' production routes over the fast lane's production render service, and
the client's readers on the answers that service gives. The same pages in a browser against a live server are
tests/test_watch_page.py and tests/test_review_page.py; the command as a person runs it, tests/test_cli_render.py."""

from __future__ import annotations

import argparse
import io
import json
import re
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from mcp_types import CallToolResult
from PIL import Image
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount

from mcp_protocol.quality import QcReport
from serve_app.ingress._listings import listing_routes
from serve_app.ingress._origin import OriginGuard, OriginPolicy
from serve_app.ingress.auth import authentication
from serve_app.ingress.review.pages import SECURITY_HEADERS
from serve_app.ingress.review.routes import review_routes
from serve_app.ingress.watch.routes import watch_routes
from tests.fast_wire import TOKENS, FastWire, _LoopTransport, fast_wire
from vidforge_client._listing import print_render
from vidforge_client._quality import ResultQuality
from vidforge_client._render import RenderedVideo
from vidforge_client.commands import register_client_commands

KEY = "quality-surfaces-key-" + "q" * 32
BASE = "https://vf.example"
RENDER = "vidforge_render_video"
APPROVE = "vidforge_approve_watermark"
REASON = "black for 1.0 s at 0:02.0"
REPORT = QcReport.model_validate(
    {
        "verdict": "warn",
        "reasons": [REASON, "silent for 2.0 s at 0:00.0"],
        "black": [{"start_s": 2.0, "end_s": 3.0}],
        "frozen": [],
        "silent": [{"start_s": 0.0, "end_s": 2.0}],
        "loudness": {"integrated_lufs": -16.2, "range_lu": 3.1, "true_peak_dbtp": -1.5},
        "clipped_samples": 0,
        "fidelity": {"psnr_y_db": 41.25, "ssim": 0.987, "frames_compared": 6},
        "frames": {"source": 180, "output": 180},
    }
)
SHEET_IMG = re.compile(r'<img src="([^"]+)"[^>]* id="contact-sheet"')


def sheet_jpeg() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (640, 180), (40, 90, 160)).save(out, "JPEG", quality=80)
    return out.getvalue()


SHEET = sheet_jpeg()


@pytest.fixture(scope="module")
def wire(tmp_path_factory):
    with fast_wire(
        tmp_path_factory.mktemp("quality-surfaces"), review_key=KEY, public_url=BASE, max_concurrent_renders=1000
    ) as wire:
        yield wire


@pytest.fixture(scope="module")
def browser(wire):
    """An httpx client on the watch and review routes, behind the production Origin/Host guard, served by the
    production render service (the fast lane's RegistryRenderService) on the wire's loop."""
    app = Starlette(
        routes=[*watch_routes(wire.config, wire.service), *review_routes(wire.config, wire.service)],
        middleware=[Middleware(OriginGuard, policy=OriginPolicy.from_config(wire.config))],
    )
    with httpx.Client(transport=_LoopTransport(wire, app), base_url=BASE) as client:
        yield client


def finished(wire: FastWire, **checked) -> tuple[str, dict]:
    """A render finished with `checked` (its `qc` and `contact_sheet`): its id, and its result as tasks/get answers."""
    args = {"source_asset_uri": wire.media.video, "output_format": "mp4", "resolution": "720p"}
    task_id = wire.tool(RENDER, args, tasks=True)["taskId"]
    wire.succeed(task_id, **checked)
    return task_id, wire.task("tasks/get", task_id)["result"]["result"]


def watch_link(result: dict) -> tuple[str, str]:
    """(path, capability) of the watch link the result's text hands out."""
    url = urlsplit(json.loads(result["content"][0]["text"])["watch_url"])
    return url.path, parse_qs(url.query)["cap"][0]


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


# -- the watch page ----------------------------------------------------------------------------------------------


def test_the_watch_page_shows_the_verdict_its_reasons_and_the_contact_sheet(wire, browser):
    task_id, result = finished(wire, qc=REPORT, contact_sheet=SHEET)
    path, cap = watch_link(result)
    page = browser.get(path, params={"cap": cap})
    assert page.status_code == 200, page.text
    text = text_of(page.text)
    assert "Quality check: warn." in text and "worth a look" in text
    assert f"<li>{REASON}</li>" in page.text and "silent for 2.0 s at 0:00.0" in text
    (src,) = SHEET_IMG.findall(page.text)
    assert src == f"/watch/{task_id}/contact-sheet.jpg?cap={cap}"  # through the page's own capability
    sheet = browser.get(src)
    assert sheet.status_code == 200 and sheet.content == SHEET and sheet.headers["content-type"] == "image/jpeg"
    for name, value in SECURITY_HEADERS.items():
        assert sheet.headers[name] == value, name
    # The capability is the credential for the sheet as for the video: none, another task's, a review token: 403.
    _, other_result = finished(wire, qc=REPORT, contact_sheet=SHEET)
    _, other_cap = watch_link(other_result)
    for token in (None, other_cap, cap[:-2] + ("AA" if not cap.endswith("AA") else "BB")):
        params = {"cap": token} if token else {}
        refused = browser.get(f"/watch/{task_id}/contact-sheet.jpg", params=params)
        assert refused.status_code == 403 and refused.headers["content-type"].startswith("text/html")


def test_a_video_without_a_check_shows_its_page_as_before(wire, browser):
    _, result = finished(wire)
    path, cap = watch_link(result)
    page = browser.get(path, params={"cap": cap})
    assert page.status_code == 200 and 'id="video"' in page.text
    assert "Quality check" not in page.text and "contact-sheet" not in page.text
    assert browser.get(f"{path}/contact-sheet.jpg", params={"cap": cap}).status_code == 404


def test_a_check_whose_sheet_is_gone_shows_its_verdict_and_no_broken_image(wire, browser):
    _, result = finished(wire, qc=REPORT)  # the report kept, the sheet never stored
    path, cap = watch_link(result)
    page = browser.get(path, params={"cap": cap})
    assert "Quality check: warn." in text_of(page.text) and not SHEET_IMG.findall(page.text)
    assert browser.get(f"{path}/contact-sheet.jpg", params={"cap": cap}).status_code == 404


# -- the review page ---------------------------------------------------------------------------------------------


def test_the_review_page_of_a_finished_render_shows_its_check_and_links_its_watch_page(wire, browser):
    args = {
        "source_asset_uri": wire.media.video,
        "output_format": "mp4",
        "resolution": "720p",
        "watermark": {"image_asset_uri": wire.media.image},
    }
    task_id = wire.tool(RENDER, args, tasks=True)["taskId"]
    asked = wire.ask_approval(task_id)
    review = urlsplit(wire.service.review_url(asked))
    path, cap = review.path, parse_qs(review.query)["cap"][0]
    assert wire.tool(APPROVE, {"render_id": task_id, "approved": True})["isError"] is False

    approved = browser.get(path, params={"cap": cap})  # approved, still rendering: nothing of a check yet
    assert "is being finished" in approved.text and "Quality check" not in approved.text
    assert not SHEET_IMG.findall(approved.text) and 'id="watch"' not in approved.text

    wire.succeed(task_id, qc=REPORT, contact_sheet=SHEET)
    page = browser.get(path, params={"cap": cap})
    assert page.status_code == 200
    text = text_of(page.text)
    assert "the video is finished with this watermark" in text and "Quality check: warn." in text and REASON in text
    watch_url = wire.service.watch_url(wire.run(wire.registry.get_any(task_id)))
    assert re.search(r'<a href="([^"]+)" id="watch">', page.text)[1] == watch_url.replace("&", "&amp;")
    (src,) = SHEET_IMG.findall(page.text)
    assert src == f"/review/{task_id}/contact-sheet.jpg?cap={cap}"  # the review link's own capability
    sheet = browser.get(src)
    assert sheet.status_code == 200 and sheet.content == SHEET and sheet.headers["content-type"] == "image/jpeg"
    # A watch link's token opens no review image, and no token opens none.
    _, watch_cap = watch_link({"content": [{"text": json.dumps({"watch_url": watch_url})}]})
    for params in ({"cap": watch_cap}, {}):
        assert browser.get(f"/review/{task_id}/contact-sheet.jpg", params=params).status_code == 403


# -- the client --------------------------------------------------------------------------------------------------


def test_vidforge_render_prints_the_verdict_and_writes_the_sheet_beside_the_video(wire, tmp_path):
    task_id, result = finished(wire, qc=REPORT, contact_sheet=SHEET)
    quality = ResultQuality.of(CallToolResult.model_validate(result), RENDER)
    assert quality.report is not None and quality.sheet == SHEET
    out = tmp_path / "clip.720p.mp4"
    sheet = quality.save_sheet(out)
    assert sheet == tmp_path / "clip.720p.contact-sheet.jpg" and sheet.read_bytes() == SHEET
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clip.720p.contact-sheet.jpg"]  # no partial file left
    video = RenderedVideo(task_id, "vidforge://videos/x/final.mp4", out, 64, 2.0, quality.report, sheet)
    assert video.lines() == [
        f"saved {out} (64 bytes, 2 s, {task_id})",
        f"saved {sheet} (the quality check's contact sheet)",
        "quality check: warn",
        f"  - {REASON}",
        "  - silent for 2.0 s at 0:00.0",
    ]


def test_vidforge_render_of_an_unchecked_video_writes_and_prints_nothing_more(wire, tmp_path):
    _, result = finished(wire)
    quality = ResultQuality.of(CallToolResult.model_validate(result), RENDER)
    assert quality == ResultQuality(None, None) and quality.save_sheet(tmp_path / "out.mp4") is None
    assert not list(tmp_path.iterdir())


def test_vidforge_render_says_in_its_help_where_the_sheet_goes():
    sub = argparse.ArgumentParser().add_subparsers()
    register_client_commands(sub, sub.add_parser("assets").add_subparsers())
    help_text = " ".join(sub.choices["render"].format_help().split())
    assert "<output stem>.contact-sheet.jpg" in help_text and "verdict and reasons are printed" in help_text


def get_render(wire: FastWire, render_id: str) -> object:
    """`GET /renders/{render_id}` from the production listing routes, behind the bearer auth, as alice."""
    routes = listing_routes(wire.service, wire.config)
    app = Starlette(routes=[Mount("", routes=routes, middleware=[authentication(wire.config, TOKENS)])])
    with httpx.Client(transport=_LoopTransport(wire, app), base_url="http://127.0.0.1:8000") as http:
        response = http.get(f"/renders/{render_id}", headers={"Authorization": "Bearer tok-alice"})
    assert response.status_code == 200, response.text
    return response.json()


def test_vidforge_renders_get_shows_the_verdict_reasons_loudness_and_fidelity(wire, capsys):
    task_id, _ = finished(wire, qc=REPORT, contact_sheet=SHEET)
    print_render(get_render(wire, task_id), task_id, as_json=False)
    shown = capsys.readouterr().out
    cells = [[cell.strip() for cell in line.split("│")[1:3]] for line in shown.splitlines() if line.count("│") == 3]
    rows = {name: value for name, value in cells if name}
    assert rows["quality check"] == "warn"
    assert REASON in shown and "silent for 2.0 s at 0:00.0" in shown
    assert rows["loudness"] == "-16.2 LUFS, true peak -1.5 dBTP"
    assert rows["fidelity"] == "PSNR 41.25 dB, SSIM 0.987"

    unchecked, _ = finished(wire)
    print_render(get_render(wire, unchecked), unchecked, as_json=False)
    assert "quality" not in capsys.readouterr().out
