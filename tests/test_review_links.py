"""The watermark review link, in-process: the signed capability, the link the wire hands out, the state dir's key,
the elicitation mode a request gets, the wire bodies that carry the link (schema-validated), and the review routes
themselves (headers, refusals, the decision through the registry). The browser test is tests/test_review_page.py."""

from __future__ import annotations

import re
import stat
from urllib.parse import parse_qs, urlsplit

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware

from mcp_protocol._elicitation import ElicitationMode, approval_mode, declared_modes
from mcp_protocol.domain import ApprovalAnswer, TaskRecord
from serve_app._config import Config
from serve_app.ingress._origin import OriginGuard, OriginPolicy
from serve_app.ingress.review.capability import LinkRefused, ReviewCapability, ReviewSigner
from serve_app.ingress.review.links import ReviewImage
from serve_app.ingress.review.pages import ReviewedRender
from serve_app.ingress.review.routes import review_routes
from serve_app.launch._review_key import review_key_path, with_review_key
from tests.fast_wire import FastWire, _LoopTransport, fast_wire
from tests.harness import TASKS_EXT, validate

KEY = "test-review-key-" + "x" * 32
RENDER = "vidforge_render_video"
STATUS = "vidforge_get_render_status"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


# -- the capability ----------------------------------------------------------------------------------------------


def refusal(call) -> LinkRefused:
    with pytest.raises(LinkRefused) as refused:
        call()
    return refused.value


def test_a_capability_verifies_for_its_task_until_it_expires():
    signer = ReviewSigner(KEY)
    cap = ReviewCapability("task_a", 1, 2_000)
    token = signer.token(cap)
    assert signer.verify("task_a", token, now_s=1_999.9) == cap
    assert refusal(lambda: signer.verify("task_a", token, now_s=2_000)).status == 410  # expired: gone, not forbidden


@pytest.mark.parametrize(
    "task_id, edit",
    [
        ("task_b", lambda token: token),  # another task's page
        ("task_a", lambda token: token[:-1] + ("A" if token[-1] != "A" else "B")),  # signature edited
        ("task_a", lambda token: token.replace(".2000.", ".9000.")),  # expiry pushed out
        ("task_a", lambda token: "2" + token[1:]),  # another approval round
        ("task_a", lambda token: ""),  # none
        ("task_a", lambda token: "1.2000.short"),  # malformed
    ],
)
def test_a_tampered_or_moved_capability_is_refused_403(task_id, edit):
    signer = ReviewSigner(KEY)
    token = edit(signer.token(ReviewCapability("task_a", 1, 2_000)))
    refused = refusal(lambda: signer.verify(task_id, token, now_s=1_000))
    assert refused.status == 403 and "not valid" in refused.title


def test_another_key_signs_other_tokens():
    token = ReviewSigner(KEY).token(ReviewCapability("task_a", 1, 2_000))
    assert refusal(lambda: ReviewSigner("another-key-" + "y" * 32).verify("task_a", token, 1_000)).status == 403


# -- the key in the state dir ------------------------------------------------------------------------------------


def test_the_review_key_is_generated_once_into_the_state_dir_with_mode_0600(tmp_path):
    config = Config(data_dir=str(tmp_path / "data"), state_dir=str(tmp_path / "state"))
    first = with_review_key(config)
    path = review_key_path(config)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert first.review_key and len(first.review_key) >= 32 and first.review_key not in repr(first)
    assert with_review_key(config).review_key == first.review_key  # read back, not regenerated
    assert with_review_key(config.model_copy(update={"review_key": KEY})).review_key == KEY  # the setting wins
    assert [p.name for p in path.parent.iterdir()] == ["review.key"]  # nothing left aside


def test_a_link_must_outlive_the_approval_window():
    with pytest.raises(ValueError, match="VIDFORGE_REVIEW_LINK_TTL_S"):
        Config(approval_timeout_s=7200, review_link_ttl_s=3600)


# -- the elicitation mode ----------------------------------------------------------------------------------------

FORM_MODE, URL_MODE = ElicitationMode.FORM, ElicitationMode.URL


@pytest.mark.parametrize(
    "declared, link, mode",
    [
        ({}, "https://vf/review/t?cap=x", FORM_MODE),  # the empty object means form
        ({"form": {}}, "https://vf/review/t?cap=x", FORM_MODE),
        ({"url": {}}, "https://vf/review/t?cap=x", URL_MODE),
        ({"form": {}, "url": {}}, "https://vf/review/t?cap=x", URL_MODE),  # both: the page shows the image
        ({"form": {}, "url": {}}, None, FORM_MODE),  # no link minted: form, which was declared too
        ({"url": {}}, None, None),  # only url and no link: nothing undeclared is sent
        (None, "https://vf/review/t?cap=x", None),  # no elicitation capability
        ({"sampling": {}}, "https://vf/review/t?cap=x", None),
    ],
)
def test_the_approval_is_asked_only_in_a_declared_mode_url_first(declared, link, mode):
    assert approval_mode(declared_modes(declared), link) is mode


# -- the wire carries the link -------------------------------------------------------------------------------------


def meta_with(elicitation: dict | None) -> dict:
    caps: dict = {"extensions": {TASKS_EXT: {}}}
    if elicitation is not None:
        caps["elicitation"] = elicitation
    return {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps,
    }


@pytest.fixture
def wire(tmp_path):
    with fast_wire(tmp_path, review_key=KEY, public_url="https://vf.example") as wire:
        yield wire


def awaiting_approval(wire: FastWire) -> str:
    args = {
        "source_asset_uri": wire.media.video,
        "output_format": "mp4",
        "resolution": "720p",
        "watermark": {"image_asset_uri": wire.media.image, "position": "top_left", "opacity": 0.5},
    }
    task_id = wire.tool(RENDER, args, tasks=True)["taskId"]
    wire.ask_approval(task_id)
    return task_id


def get_task(wire: FastWire, task_id: str, elicitation: dict | None) -> dict:
    return wire.task("tasks/get", task_id, params={"_meta": meta_with(elicitation)})["result"]


LINK = re.compile(r"https://vf\.example/review/(task_[A-Za-z0-9_-]+)\?cap=[0-9]+\.[0-9]+\.[A-Za-z0-9_-]{43}")


def test_url_mode_points_at_the_review_link_and_every_message_carries_it(wire):
    task_id = awaiting_approval(wire)
    url_task = get_task(wire, task_id, {"form": {}, "url": {}})
    ((key, request),) = url_task["inputRequests"].items()
    validate(request, "core", "ElicitRequest")
    validate(request["params"], "core", "ElicitRequestURLParams")
    params = request["params"]
    assert key == "watermark-approval-1" and params["mode"] == "url" and set(params) == {"mode", "url", "message"}
    assert LINK.fullmatch(params["url"])[1] == task_id
    assert "(top_left, opacity 0.5)" in params["message"] and "within 30 minutes" in params["message"]
    # The same link, beside the resource URI, in the status message; the same on every poll of the round.
    preview = f"vidforge://renders/{task_id}/watermark-preview.png"
    assert f"{preview} (in a browser: {params['url']})." in url_task["statusMessage"]
    assert get_task(wire, task_id, {"url": {}})["inputRequests"][key]["params"]["url"] == params["url"]

    form_task = get_task(wire, task_id, {"form": {}})
    form = form_task["inputRequests"][key]
    validate(form["params"], "core", "ElicitRequestFormParams")
    assert form["params"]["mode"] == "form" and set(form["params"]["requestedSchema"]["properties"]) == {
        "approved",
        "note",
    }
    assert f"Preview: {preview} (top_left, opacity 0.5); open {params['url']} to see it" in form["params"]["message"]
    assert get_task(wire, task_id, {})["inputRequests"][key]["params"]["mode"] == "form"  # empty: form

    bare = get_task(wire, task_id, None)
    assert bare["inputRequests"] == {} and params["url"] in bare["statusMessage"]
    assert f"`vidforge_approve_watermark` with `{{render_id: '{task_id}'" in bare["statusMessage"]

    status = wire.tool(STATUS, {"render_id": task_id})
    validate(status, "core", "CallToolResult")
    structured = status["structuredContent"]
    assert structured["watermark_preview_uri"] == preview
    assert structured["status_message"].endswith(f"Review the preview and decide in a browser: {params['url']}")


def test_a_url_mode_accept_is_not_a_decision(wire):
    task_id = awaiting_approval(wire)
    accepted = {"watermark-approval-1": {"action": "accept"}}  # the person went to the page
    wire.task("tasks/update", task_id, params={"inputResponses": accepted, "_meta": meta_with({"url": {}})})
    assert get_task(wire, task_id, {"url": {}})["status"] == "input_required"


def test_without_a_key_the_wire_names_only_the_resource(tmp_path):
    with fast_wire(tmp_path) as wire:
        task_id = awaiting_approval(wire)
        task = get_task(wire, task_id, {"form": {}, "url": {}})
        assert task["inputRequests"]["watermark-approval-1"]["params"]["mode"] == "form"
        assert "/review/" not in str(task)


# -- the review routes -------------------------------------------------------------------------------------------


class MemoryReviewBackend:
    """`ReviewBackend` over the fast lane's in-process registry (RayRenderService's, minus Ray and the store)."""

    def __init__(self, wire: FastWire) -> None:
        self.registry = wire.registry

    async def review_render(self, task_id: str) -> ReviewedRender | None:
        rec = await self.registry.get_any(task_id)
        return ReviewedRender(rec, 12.5, (1280, 720)) if rec is not None else None

    async def review_decide(self, rec: TaskRecord, approved: bool, note: str | None) -> ApprovalAnswer:
        return await self.registry.answer_input(rec.principal, rec.task_id, approved, note)

    async def review_image(self, task_id: str, which: ReviewImage) -> bytes | None:
        return PNG


@pytest.fixture
def browser(wire):
    """An httpx client on the review routes, behind the production Origin/Host guard, on the wire's loop."""
    import httpx

    config = wire.config
    app = Starlette(
        routes=review_routes(config, MemoryReviewBackend(wire)),
        middleware=[Middleware(OriginGuard, policy=OriginPolicy.from_config(config))],
    )
    with httpx.Client(transport=_LoopTransport(wire, app), base_url="https://vf.example") as client:
        yield client


def review_link(wire: FastWire, task_id: str) -> tuple[str, str]:
    """(path, capability) of the task's link, as the status message gives it."""
    url = LINK.search(get_task(wire, task_id, None)["statusMessage"])[0]
    parts = urlsplit(url)
    return parts.path, parse_qs(parts.query)["cap"][0]


SECURITY = {
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


def test_the_page_shows_the_render_and_carries_the_security_headers(wire, browser):
    task_id = awaiting_approval(wire)
    path, cap = review_link(wire, task_id)
    page = browser.get(path, params={"cap": cap})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    for name, value in SECURITY.items():
        assert page.headers[name] == value
    csp = page.headers["content-security-policy"]
    for directive in ("default-src 'none'", "img-src 'self'", "style-src 'self'", "form-action 'self'"):
        assert directive in csp
    assert "frame-ancestors 'none'" in csp
    html = page.text
    assert '<meta name="viewport"' in html and "top left" in html and "50%" in html and "MP4" in html
    assert "720p (1280 × 720 pixels)" in html and "12.5 s" in html and "29 minutes" in html
    assert f'name="cap" value="{cap}"' in html and '<label for="note">' in html
    image = browser.get(f"{path}/preview.png", params={"cap": cap})
    assert image.status_code == 200 and image.content == PNG and image.headers["cache-control"] == "no-store"
    assert browser.get(f"{path}/preview.png").status_code == 403  # images need the capability too
    assert browser.get(f"{path}/other.png", params={"cap": cap}).status_code == 404
    assert browser.get("/review/static/review.css").headers["content-type"].startswith("text/css")


def test_approve_once_then_the_page_is_read_only(wire, browser):
    task_id = awaiting_approval(wire)
    path, cap = review_link(wire, task_id)
    origin = {"Origin": "https://vf.example", **FORM}
    decided = browser.post(path, data={"cap": cap, "decision": "approve"}, headers=origin)
    assert decided.status_code == 303 and decided.headers["location"] == f"{path}?cap={cap}"
    assert get_task(wire, task_id, None)["status"] == "working"
    again = browser.post(path, data={"cap": cap, "decision": "approve"}, headers={"Origin": "null", **FORM})
    assert again.status_code == 303  # the same decision again: a no-op
    conflict = browser.post(path, data={"cap": cap, "decision": "reject", "note": "no"}, headers=origin)
    assert conflict.status_code == 409 and "approval_already_recorded" in conflict.text
    assert get_task(wire, task_id, None)["status"] == "working"
    shown = browser.get(path, params={"cap": cap}).text
    assert "Approved" in shown and "<form" not in shown


def test_a_rejection_with_a_note_reaches_the_agent(wire, browser):
    task_id = awaiting_approval(wire)
    path, cap = review_link(wire, task_id)
    form = {"cap": cap, "decision": "reject", "note": "make it smaller"}
    assert browser.post(path, data=form, headers=FORM).status_code == 303
    result = get_task(wire, task_id, None)["result"]
    assert result["structuredContent"]["code"] == "watermark_rejected"
    assert "make it smaller" in result["content"][0]["text"]


def test_refusals_change_nothing(wire, browser):
    task_id = awaiting_approval(wire)
    path, cap = review_link(wire, task_id)
    other_id = awaiting_approval(wire)
    expired = ReviewSigner(KEY).token(ReviewCapability(task_id, 1, 1))
    approve = {"decision": "approve"}
    cases = [
        (f"/review/{other_id}", {"cap": cap, **approve}, {}, 403),  # another task's page
        (path, {"cap": cap[:-2] + "AA", **approve}, {}, 403),  # tampered
        (path, {"cap": expired, **approve}, {}, 410),  # expired
        (path, {"cap": cap, **approve}, {"Origin": "https://evil.example"}, 403),  # foreign origin (the guard)
        (path, {"cap": cap, **approve}, {"Origin": "null", "Referer": "https://evil.example/x"}, 403),
        (path, {"cap": cap, "decision": "maybe"}, {}, 400),
        (path, {"cap": cap, "decision": "reject", "note": "n" * 2001}, {}, 422),  # the tool's maxLength
    ]
    for target, data, headers, status in cases:
        response = browser.post(target, data=data, headers={**FORM, **headers})
        assert response.status_code == status, (target, data, headers, response.text)
        assert response.headers["content-type"].startswith("text/html") and "<h1>" in response.text
    too_large = browser.post(path, content=b"cap=" + b"x" * 40_000, headers=FORM)
    assert too_large.status_code == 413 and "VIDFORGE_REVIEW_FORM_MAX_BYTES" in too_large.text
    assert browser.get(path, params={"cap": expired}).status_code == 410
    for task in (task_id, other_id):
        assert get_task(wire, task, None)["status"] == "input_required"
