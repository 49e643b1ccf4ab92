"""Drive vidforge's native task path with FastMCP's client and `fastmcp-tasks` (SEP-2663), code unchanged.

Runs inside `.clients/fastmcp-tasks` (tests/clients/python/fastmcp-tasks.txt), started by
tests/test_legacy_clients.py:

    python fastmcp_tasks_render.py URL TOKEN SOURCE_URI LOGO_URI {approve|reject}

`call_tool_task` creates the task; `ToolTask.result()` polls `tasks/get`, answers the watermark form
elicitation through `elicitation_handler` (approved true/false) with `tasks/update`, and polls on to the
terminal task. Prints one JSON report on stdout, including what the client put on the wire.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

import fastmcp_tasks  # importing it registers the tasks client extension on every FastMCP Client
import httpx2
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport

RESULT_TIMEOUT_S = 300


class WireLog:
    """Per POST: the JSON-RPC method and the routing headers the client chose to send."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    async def on_request(self, request: httpx2.Request) -> None:
        try:
            body = json.loads(request.content) if request.content else {}
        except ValueError:
            body = {}
        self.requests.append(
            {
                "method": body.get("method") if isinstance(body, dict) else None,
                "mcp_protocol_version": request.headers.get("mcp-protocol-version"),
                "mcp_name": request.headers.get("mcp-name"),
            }
        )

    def client_factory(self, **kwargs: Any) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(event_hooks={"request": [self.on_request]}, **kwargs)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    log = WireLog()
    report: dict[str, Any] = {"wire": log.requests, "elicitations": []}

    async def answer_watermark_form(message: str, response_type: Any, params: Any, context: Any) -> dict[str, Any]:
        report["elicitations"].append({"message": message, "schema": params.requested_schema})
        if args.decision == "approve":
            return {"approved": True}
        return {"approved": False, "note": "move it to the top left"}

    transport = StreamableHttpTransport(args.url, auth=args.token, httpx_client_factory=log.client_factory)
    render_args = {
        "source_asset_uri": args.source,
        "output_format": "mp4",
        "resolution": "720p",
        "watermark": {"image_asset_uri": args.logo, "position": "bottom_right", "opacity": 0.6},
    }
    async with Client(transport, elicitation_handler=answer_watermark_form) as client:
        task = await fastmcp_tasks.call_tool_task(client, "vidforge_render_video", render_args, raise_on_error=False)
        report["created"] = task.create_result.model_dump(mode="json", by_alias=True, exclude_none=True)
        result = await asyncio.wait_for(task.result(), RESULT_TIMEOUT_S)
        report["is_error"] = result.is_error
        report["structured_content"] = result.structured_content
        report["final"] = (await task.status()).model_dump(mode="json", by_alias=True, exclude_none=True)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("token")
    parser.add_argument("source")
    parser.add_argument("logo")
    parser.add_argument("decision", choices=["approve", "reject"])
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args)), default=str))


if __name__ == "__main__":
    main()
