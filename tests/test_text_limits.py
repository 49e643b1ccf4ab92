"""One bound on caller free text, on every way in (issue 32, item 6), in-process on the fast lane (the production
`/mcp` stack over the real TaskRegistry; tests/fast_wire.py) and the production review routes; an upload's name
through a real server.

A watermark decision's note longer than FREE_TEXT_MAX_CHARS (the approve tool's published `note.maxLength`) is
refused — by `tasks/update` with -32602 and `invalid_argument`'s envelope, by the approve tool as an
`invalid_argument` result, by the review page with a 422 page — naming the limit, and the task is left exactly as
it was. Caller text an answer quotes back (an asset URI that names nothing, a schema violation's value, a note
kept before the bound) is quoted only up to the same bound.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware

from mcp_protocol.domain import TaskStatus
from mcp_protocol.text_limits import FREE_TEXT_MAX_CHARS
from serve_app.ingress._origin import OriginGuard, OriginPolicy
from serve_app.ingress.review.routes import review_routes
from tests.fast_wire import FastWire, _LoopTransport, fast_wire
from tests.media import make_watermark_png
from tests.test_review_links import KEY, MemoryReviewBackend, review_link

RENDER = "vidforge_render_video"
STATUS = "vidforge_get_render_status"
APPROVE = "vidforge_approve_watermark"
KEY_1 = "watermark-approval-1"
HUGE = 300_000
LIMIT_NAMED = f"the limit is {FREE_TEXT_MAX_CHARS}"


@pytest.fixture
def wire(tmp_path):
    with fast_wire(tmp_path, review_key=KEY, public_url="https://vf.example") as wire:
        yield wire


def awaiting_approval(wire: FastWire) -> str:
    args = {"source_asset_uri": wire.media.video, "output_format": "mp4", "resolution": "720p"}
    watermark = {"image_asset_uri": wire.media.image}
    render_id = wire.tool(RENDER, {**args, "watermark": watermark})["structuredContent"]["render_id"]
    wire.ask_approval(render_id)
    return render_id


def stored(wire: FastWire, task_id: str):
    rec = wire.run(wire.registry.get_any(task_id))
    assert rec is not None
    return rec


def update(wire: FastWire, task_id: str, content: dict) -> dict:
    responses = {KEY_1: {"action": "accept", "content": content}}
    return wire.task("tasks/update", task_id, params={"inputResponses": responses})


def test_tasks_update_refuses_a_note_past_the_limit_and_records_nothing(wire):
    task_id = awaiting_approval(wire)
    before = stored(wire, task_id)
    refused = update(wire, task_id, {"approved": False, "note": "n" * HUGE})
    error = refused["error"]
    assert error["code"] == -32602, error
    envelope = error["data"]
    assert envelope["machine_code"] == "invalid_argument" and envelope["temporary"] is False
    assert envelope["details"]["field"] == f"inputResponses.{KEY_1}.content.note"
    assert f"{HUGE} characters" in envelope["details"]["reason"] and LIMIT_NAMED in envelope["details"]["reason"]
    assert envelope["repair"]["arguments"] == {"render_id": task_id, "approved": False}
    assert len(json.dumps(refused)) < 4 * FREE_TEXT_MAX_CHARS  # the note is not echoed back
    assert stored(wire, task_id) == before  # not a field changed, not a version bumped

    at_limit = "n" * FREE_TEXT_MAX_CHARS  # the bound itself is accepted, and kept whole
    assert update(wire, task_id, {"approved": False, "note": at_limit})["result"]["resultType"] == "complete"
    rec = stored(wire, task_id)
    assert rec.status is TaskStatus.COMPLETED and rec.approval is not None and rec.approval.note == at_limit


def test_the_approve_tool_refuses_a_note_past_the_limit_naming_it(wire):
    task_id = awaiting_approval(wire)
    before = stored(wire, task_id)
    result = wire.tool(APPROVE, {"render_id": task_id, "approved": False, "note": "n" * HUGE})
    envelope = result["structuredContent"]
    assert result["isError"] is True and envelope["code"] == "invalid_argument"
    assert envelope["details"]["field"] == "note"
    assert f"{HUGE} characters" in envelope["details"]["reason"] and LIMIT_NAMED in envelope["details"]["reason"]
    assert envelope["repair"]["arguments"] == {"render_id": task_id, "approved": False}  # the note dropped
    assert len(json.dumps(result)) < 4 * FREE_TEXT_MAX_CHARS
    assert stored(wire, task_id) == before


def test_the_review_page_refuses_a_note_past_the_same_limit(wire):
    task_id = awaiting_approval(wire)
    before = stored(wire, task_id)
    config = wire.config
    app = Starlette(
        routes=review_routes(config, MemoryReviewBackend(wire)),
        middleware=[Middleware(OriginGuard, policy=OriginPolicy.from_config(config))],
    )
    form_type = {"Content-Type": "application/x-www-form-urlencoded"}
    with httpx.Client(transport=_LoopTransport(wire, app), base_url="https://vf.example") as browser:
        path, cap = review_link(wire, task_id)
        over = {"cap": cap, "decision": "reject", "note": "n" * (FREE_TEXT_MAX_CHARS + 1)}
        refused = browser.post(path, data=over, headers=form_type)
        assert refused.status_code == 422 and f"at most {FREE_TEXT_MAX_CHARS} characters" in refused.text
        huge = browser.post(path, data={**over, "note": "n" * HUGE}, headers=form_type)
        assert huge.status_code == 413
        assert stored(wire, task_id) == before
        # The bound counts characters: a note at it in 4-byte characters (12 bytes each, percent-encoded) fits the
        # default form size, so the page accepts what the other ways in accept.
        at_limit = {**over, "note": "\U0001f600" * FREE_TEXT_MAX_CHARS}
        assert browser.post(path, data=at_limit, headers=form_type).status_code == 303
    assert stored(wire, task_id).approval.note == "\U0001f600" * FREE_TEXT_MAX_CHARS


def test_caller_text_quoted_back_is_bounded(wire):
    long_uri = "vidforge://assets/" + "x" * HUGE
    render = wire.tool(RENDER, {"source_asset_uri": long_uri, "output_format": "mp4", "resolution": "720p"})
    assert render["structuredContent"]["code"] == "source_not_found"
    assert len(json.dumps(render)) < 4 * FREE_TEXT_MAX_CHARS
    wrong_type = wire.tool(STATUS, {"render_id": ["x" * HUGE]})  # jsonschema's message quotes the value
    assert wrong_type["structuredContent"]["code"] == "invalid_argument"
    assert len(json.dumps(wrong_type)) < 4 * FREE_TEXT_MAX_CHARS


def test_a_note_kept_before_the_bound_is_read_back_bounded(wire):
    """A rejection recorded with a longer note (the registry takes what the ways in let through; before the bound,
    tasks/update let anything through) is quoted back only up to the bound on every read."""
    task_id = awaiting_approval(wire)
    wire.run(wire.registry.answer_input("alice", task_id, False, "n" * HUGE))
    status = wire.tool(STATUS, {"render_id": task_id})
    assert status["structuredContent"]["error"]["code"] == "watermark_rejected"
    assert len(json.dumps(status)) < 4 * FREE_TEXT_MAX_CHARS
    task = wire.task("tasks/get", task_id)
    assert task["result"]["status"] == "completed" and len(json.dumps(task)) < 4 * FREE_TEXT_MAX_CHARS


# -- end to end: an upload through a real `vidforge serve` ---------------------------------------------------------

TOKENS = {"tok-text-limits": "text-limits"}


@pytest.mark.slow
def test_an_uploads_filename_is_kept_only_up_to_the_bound(shared_server, tmp_path):
    """The upload's name is a label vidforge keeps in the asset's metadata: bounded like every caller text."""
    png = make_watermark_png(str(tmp_path / "logo.png"))
    name = "f" * 3 * FREE_TEXT_MAX_CHARS + ".png"  # past the bound, within what a request line may carry
    response = httpx.post(
        f"{shared_server.base}/assets",
        params={"filename": name},
        content=Path(png).read_bytes(),
        headers={"Authorization": "Bearer tok-text-limits"},
        timeout=120,
    )
    assert response.status_code == 201, response.text
    asset_id = response.json()["uri"].removeprefix("vidforge://assets/")
    meta = json.loads((shared_server.data_dir / "assets" / asset_id / "meta.json").read_text())
    assert meta["filename"] == "f" * FREE_TEXT_MAX_CHARS
