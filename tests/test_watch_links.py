"""The watch link of a finished render and the result that names it, unit by unit (pure: no server).

The contract's §3.4 success result is kept word for word where it is the contract's: its `structuredContent` and
text are those of the contract's example, and a watch link adds to the text content and the video's `resource_link`
description only, never to `structuredContent`; a second `resource_link` names the poster. The link is the review
page's capability, under a purpose of its own: minted only for a render with a video, working until the result's
retention ends, refused (403) when tampered with, moved to another task, or a review link; expired (410) after.
"""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

import pytest

from mcp_protocol.domain import Artifact, Failed, RenderRequest, Succeeded, TaskRecord, Watermark
from mcp_protocol.error_codes import ErrorCode
from mcp_protocol.results import end_result, render_success_result
from serve_app._config import Config
from serve_app.ingress.review.capability import LinkRefused, ReviewSigner
from serve_app.ingress.watch.links import WatchLinks, watch_signer
from tests.harness import REPO

CONTRACT = REPO.parent / "shared/design/000_7c3b4fd17160ea82.txt"
KEY = "k" * 32
FINISHED_MS = 1_785_334_187_000  # 2026-07-29T14:09:47Z, the contract example's lastUpdatedAt
WEEK_S = 604_800
WATCH = "http://127.0.0.1:8000/watch/task_01JVID8Q2R?cap=1.1785938987.sig"


def contract_success() -> dict:
    """The contract's §3.4 example: the completed task whose result is the rendered video."""
    blocks = [block.split("```")[0] for block in CONTRACT.read_text().split("```json")[1:]]
    (example,) = [json.loads(b) for b in blocks if "structuredContent" in b and '"resource_link"' in b]
    return example["result"]["result"]


def contract_request() -> RenderRequest:
    return RenderRequest(
        source_asset_uri="vidforge://assets/a_1",
        output_format="mp4",
        resolution="1080p",
        watermark=Watermark(image_asset_uri="vidforge://assets/a_2"),
    )


def contract_artifact() -> Artifact:
    return Artifact(ext="mp4", size_bytes=389_442_118, duration_s=184.2, finished_at_ms=FINISHED_MS)


def record(end=None) -> TaskRecord:
    """task_w: completed with `end`, or still rendering without one."""
    return TaskRecord(
        task_id="task_w",
        principal="alice",
        request=contract_request(),
        status="completed" if end is not None else "working",
        phase="done" if end is not None else "rendering",
        status_message="Render complete.",
        created_at_ms=FINISHED_MS - 60_000,
        last_updated_at_ms=FINISHED_MS,
        ttl_ms=86_400_000,
        poll_interval_ms=10_000,
        end=end,
    )


def test_the_structured_content_and_text_are_the_contracts_and_the_link_rides_beside_them():
    contract = contract_success()
    plain = render_success_result("task_01JVID8Q2R", contract_request(), contract_artifact(), WEEK_S)
    linked = render_success_result("task_01JVID8Q2R", contract_request(), contract_artifact(), WEEK_S, WATCH)
    # Byte for byte: the contract's structuredContent, with a watch link or without.
    assert json.dumps(linked["structuredContent"]) == json.dumps(contract["structuredContent"])
    assert json.dumps(plain["structuredContent"]) == json.dumps(contract["structuredContent"])
    assert plain["content"][:2] == contract["content"]  # without a link: the contract's content, then the poster
    text, video, poster = linked["content"]
    assert json.loads(text["text"]) == {**json.loads(contract["content"][0]["text"]), "watch_url": WATCH}
    assert video == {
        **contract["content"][1],
        "description": f"{contract['content'][1]['description']} Watch it in a browser: {WATCH}",
    }
    assert poster["type"] == "resource_link" and poster["uri"] == "vidforge://videos/task_01JVID8Q2R/poster.jpg"
    assert poster["mimeType"] == "image/jpeg" and poster["annotations"]["audience"] == ["user"]
    assert plain["content"][2] == poster


def test_a_watch_link_is_minted_for_a_video_only_and_works_for_the_results_retention():
    config = Config(review_key=KEY, result_retention_s=WEEK_S)
    links = WatchLinks(config)
    assert links.url(record()) is None  # not finished
    assert links.url(record(Failed(code=ErrorCode.RENDER_FAILED, reason="boom"))) is None
    assert WatchLinks(Config()).url(record(Succeeded(artifact=contract_artifact()))) is None  # no key, no links
    done = record(Succeeded(artifact=contract_artifact()))
    url = links.url(done)
    assert url is not None and url == links.url(done)  # the same link at every read
    assert url.startswith(f"{config.public_base_url}/watch/task_w?cap=")
    token = parse_qs(urlsplit(url).query)["cap"][0]
    # The result's retention, as its structuredContent's expires_at says it.
    expires_s = (FINISHED_MS + WEEK_S * 1000) // 1000
    assert end_result(done, WEEK_S)["structuredContent"]["expires_at"] == "2026-08-05T14:09:47Z"
    signer = watch_signer(config)
    assert signer is not None
    assert signer.verify("task_w", token, expires_s - 1).expires_s == expires_s
    refusals = [
        (lambda: signer.verify("task_w", token, expires_s), 410),  # past the retention
        (lambda: signer.verify("task_other", token, 0), 403),  # moved to another task's page
        (lambda: signer.verify("task_w", token[:-2] + ("AA" if not token.endswith("AA") else "BB"), 0), 403),
        (lambda: ReviewSigner(KEY).verify("task_w", token, 0), 403),  # a watch link opens no review page
        (lambda: signer.verify("task_w", None, 0), 403),
    ]
    for attempt, status in refusals:
        with pytest.raises(LinkRefused) as refused:
            attempt()
        assert refused.value.status == status
