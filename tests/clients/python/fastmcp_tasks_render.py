"""Drive vidforge's native task path with FastMCP's client and `fastmcp-tasks` (SEP-2663), code unchanged.

Runs inside `.clients/fastmcp-tasks` (tests/clients/python/fastmcp-tasks.txt), started by
tests/test_legacy_clients.py:

    python fastmcp_tasks_render.py URL TOKEN SOURCE_URI LOGO_URI {approve|reject} [--import-url LINK]

With --import-url, `vidforge_import_asset` runs first, as a task too, and its asset is the render's source instead of
SOURCE_URI. `call_tool_task` creates the task; `ToolTask.result()` polls `tasks/get`, answers the watermark elicitation
through `elicitation_handler` with `tasks/update`, and polls on to the terminal task. The SDK declares both
elicitation modes, so vidforge asks in URL mode: the handler does what the person would, opening the review page and
deciding there (approve, or reject with a note), then answers `accept` (the person went to the page). A form
elicitation is answered in the form (approved true/false). Prints one JSON report on stdout, including what the
client put on the wire.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from typing import Any

import fastmcp_tasks  # importing it registers the tasks client extension on every FastMCP Client
import httpx2
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from mcp_types import ElicitRequestURLParams, ElicitResult

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

    note = "move it to the top left"

    async def answer_watermark(message: str, response_type: Any, params: Any, context: Any) -> Any:
        if isinstance(params, ElicitRequestURLParams):
            report["elicitations"].append({"message": message, "mode": "url", "url": params.url})
            await decide_on_the_page(params.url, args.decision, note)
            return ElicitResult(action="accept")  # the person went to the page; the decision was taken there
        report["elicitations"].append({"message": message, "mode": "form", "schema": params.requested_schema})
        if args.decision == "approve":
            return {"approved": True}
        return {"approved": False, "note": note}

    transport = StreamableHttpTransport(args.url, auth=args.token, httpx_client_factory=log.client_factory)
    render_args = {
        "source_asset_uri": args.source,
        "output_format": "mp4",
        "resolution": "720p",
        "watermark": {"image_asset_uri": args.logo, "position": "bottom_right", "opacity": 0.6},
    }
    async with Client(transport, elicitation_handler=answer_watermark) as client:
        if args.import_url:
            imported = await fastmcp_tasks.call_tool_task(client, "vidforge_import_asset", {"url": args.import_url})
            report["import_created"] = imported.create_result.model_dump(mode="json", by_alias=True, exclude_none=True)
            result = await asyncio.wait_for(imported.result(), RESULT_TIMEOUT_S)
            report["imported"] = result.structured_content
            render_args["source_asset_uri"] = result.structured_content["asset_uri"]
        task = await fastmcp_tasks.call_tool_task(client, "vidforge_render_video", render_args, raise_on_error=False)
        report["created"] = task.create_result.model_dump(mode="json", by_alias=True, exclude_none=True)
        result = await asyncio.wait_for(task.result(), RESULT_TIMEOUT_S)
        report["is_error"] = result.is_error
        report["structured_content"] = result.structured_content
        report["final"] = (await task.status()).model_dump(mode="json", by_alias=True, exclude_none=True)
    return report


async def decide_on_the_page(url: str, decision: str, note: str) -> None:
    """What the person does in a browser: open the review page and submit its form (the capability is its field)."""
    async with httpx2.AsyncClient(timeout=60) as browser:
        page = (await browser.get(url)).raise_for_status()
        action = re.search(r'<form method="post" action="([^"]+)"', page.text)[1]
        cap = re.search(r'name="cap" value="([^"]+)"', page.text)[1]
        form = {"cap": cap, "decision": decision, "note": note if decision == "reject" else ""}
        decided = await browser.post(httpx2.URL(url).join(action), data=form)
        assert decided.status_code == 303, decided.text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("token")
    parser.add_argument("source")
    parser.add_argument("logo")
    parser.add_argument("decision", choices=["approve", "reject"])
    parser.add_argument("--import-url", help="import this link first and render the asset it becomes")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args)), default=str))


if __name__ == "__main__":
    main()
