"""Drive vidforge with the 2025-era official Python SDK client (`mcp` 1.x), the contract §4 fallback path.

Runs inside `.clients/mcp1` (tests/clients/python/mcp1.txt), started by tests/test_legacy_clients.py:

    python mcp1_render.py URL TOKEN SOURCE_URI LOGO_URI {approve|cancel} VIDEO_OUT [--protocol-version V]
        [--import-url LINK]

initialize → tools/list → read vidforge://capabilities → (with --import-url: vidforge_import_asset, whose asset is
the source instead of SOURCE_URI: without tasks the call answers once the import has ended) → vidforge_render_video
(`status: "accepted"`) →
poll vidforge_get_render_status to the watermark approval → vidforge_approve_watermark (or
vidforge_cancel_render) → poll to the terminal state → read the video resource into VIDEO_OUT.
Prints one JSON report on stdout for the test to judge; the client code is the SDK's, unchanged.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import time
from typing import Any

import httpx
import mcp.types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

POLL_DEADLINE_S = 300
TERMINAL_STATES = ("succeeded", "failed", "cancelled")


def pin_protocol_version(version: str) -> None:
    """mcp 1.x offers `mcp.types.LATEST_PROTOCOL_VERSION` in `initialize` (read at call time); pinning it
    is how a 1.x client speaks an older revision such as 2025-06-18."""
    mcp.types.LATEST_PROTOCOL_VERSION = version


class WireLog:
    """What the client put on the wire: per POST the JSON-RPC method and the session/version headers."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.response_session_ids: list[str] = []

    async def on_request(self, request: httpx.Request) -> None:
        try:
            method = json.loads(request.content).get("method") if request.content else None
        except ValueError:
            method = None
        self.requests.append(
            {
                "http": request.method,
                "method": method,
                "mcp_protocol_version": request.headers.get("mcp-protocol-version"),
                "mcp_session_id": request.headers.get("mcp-session-id"),
            }
        )

    async def on_response(self, response: httpx.Response) -> None:
        if session_id := response.headers.get("mcp-session-id"):
            self.response_session_ids.append(session_id)


async def call(session: ClientSession, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    assert not result.isError, result
    return result.structuredContent


async def poll_until(session: ClientSession, render_id: str, states: tuple[str, ...]) -> dict[str, Any]:
    deadline = time.monotonic() + POLL_DEADLINE_S
    while True:
        status = await call(session, "vidforge_get_render_status", {"render_id": render_id})
        if status["state"] in states:
            return status
        if time.monotonic() > deadline:
            raise TimeoutError(f"render {render_id} never reached {states}: {status}")
        await asyncio.sleep(min(status["poll_after_ms"], 1000) / 1000)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    log = WireLog()
    report: dict[str, Any] = {"wire": log.requests, "response_session_ids": log.response_session_ids}
    http = httpx.AsyncClient(
        headers={"Authorization": f"Bearer {args.token}"},
        timeout=60,
        event_hooks={"request": [log.on_request], "response": [log.on_response]},
    )
    async with http, streamable_http_client(args.url, http_client=http) as (read, write, _):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            report["initialize"] = init.model_dump(mode="json", by_alias=True, exclude_none=True)
            tools = await session.list_tools()
            report["tools"] = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools.tools]
            read_caps = await session.read_resource("vidforge://capabilities")
            report["capabilities"] = json.loads(read_caps.contents[0].text)

            source = args.source
            if args.import_url:
                report["imported"] = await call(session, "vidforge_import_asset", {"url": args.import_url})
                source = report["imported"]["asset_uri"]
            render_args = {
                "source_asset_uri": source,
                "output_format": "mp4",
                "resolution": "720p",
                "watermark": {"image_asset_uri": args.logo, "position": "bottom_right", "opacity": 0.6},
                "metadata": {"order_id": "o-1842"},  # the caller's own identifiers, back on every surface
            }
            created = await session.call_tool("vidforge_render_video", render_args)
            assert not created.isError, created
            accepted = created.structuredContent
            report["accepted"] = accepted
            report["accepted_meta"] = created.meta  # the `_meta` this client era does not know: kept, not refused
            render_id = accepted["render_id"]
            report["awaiting"] = await poll_until(session, render_id, ("awaiting_watermark_approval",))
            if args.action == "cancel":
                report["cancel"] = await call(session, "vidforge_cancel_render", {"render_id": render_id})
            else:
                approval = {"render_id": render_id, "approved": True}
                report["approve"] = await call(session, "vidforge_approve_watermark", approval)
            final = await poll_until(session, render_id, TERMINAL_STATES)
            report["final"] = final
            if final["state"] == "succeeded":
                # The finished status again, whole: the quality check's contact sheet rides as an `image` block.
                answered = await session.call_tool("vidforge_get_render_status", {"render_id": render_id})
                report["final_images"] = [
                    {"mimeType": block.mimeType, "data": block.data} for block in answered.content if block.type == "image"
                ]
                video = await session.read_resource(final["video_uri"])
                content = video.contents[0]
                report["video_mime"] = content.mimeType
                with open(args.video_out, "wb") as out:
                    out.write(base64.b64decode(content.blob))
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("token")
    parser.add_argument("source")
    parser.add_argument("logo")
    parser.add_argument("action", choices=["approve", "cancel"])
    parser.add_argument("video_out")
    parser.add_argument("--protocol-version", help="offer this revision in initialize instead of the SDK's latest")
    parser.add_argument("--import-url", help="import this link first and render the asset it becomes")
    args = parser.parse_args()
    if args.protocol_version:
        pin_protocol_version(args.protocol_version)
    print(json.dumps(asyncio.run(run(args))))


if __name__ == "__main__":
    main()
