"""Render a video with vidforge, using the official `mcp` Python SDK (2.3) as the client.

    python examples/render_with_sdk.py clip.mp4 [--watermark logo.png] [--resolution 720p] [-o out.mp4]
        [--server http://127.0.0.1:8000/mcp] [--token TOKEN]

Uploads the files (POST /assets, the raw bytes as the body), calls `vidforge_render_video` as a task, prints the
task's progress as it changes, answers the watermark approval, and downloads the video (GET /artifacts).

The task runs through the io.modelcontextprotocol/tasks extension, which the SDK does not ship: vidforge's client
package adds it through the SDK's public extension hooks (vidforge_client/tasks.py). With it, `call_tool`
follows the task to its end: it polls `tasks/get` at the server's `pollIntervalMs`, hands each state to the follower
below, sends the follower's answers with `tasks/update`, and returns as soon as a poll finds the task ended.

The SDK's client declares both elicitation modes, so vidforge asks for the approval in URL mode: the decision belongs
on its review page (the link a person opens in a browser). Standing in for that person, the script asks at the
terminal (unattended, it approves) and submits the answer on the page, then tells the server it went there (accept).
--token defaults to $VIDFORGE_TOKEN (a token of the server's tokens file; none when the server has none), --server to
$VIDFORGE_URL or http://127.0.0.1:8000/mcp. `vidforge render` (vidforge_client/_render.py) is the full command.
"""

import argparse
import asyncio
import json
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx2  # the SDK's HTTP library
from mcp import Client
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_types import ElicitRequestURLParams, ElicitResult

from vidforge_client.address import ServerAddress
from vidforge_client.failures import failure_of
from vidforge_client.tasks import ElicitParams, TasksExtension, TaskState
from vidforge_client.transfers import ServerFiles


class Follower:
    """What the tasks extension reports to (`vidforge_client.tasks.TaskFollower`): progress and the approval."""

    def __init__(self) -> None:
        self.last = ""

    def started(self, task_id: str) -> None:
        print(f"task {task_id}: started", file=sys.stderr)

    def polled(self, state: TaskState) -> None:
        line = f"task {state.task_id}: {state.status}: {state.status_message}"
        if line != self.last:  # the progress, each time it changes
            self.last = line
            print(line, file=sys.stderr)

    async def answer(self, state: TaskState, request: ElicitParams, session: ClientSession) -> ElicitResult | None:
        """The watermark approval (an `elicitation/create` in the task's `inputRequests`)."""
        print(request.message, file=sys.stderr)
        if isinstance(request, ElicitRequestURLParams):
            print(f"Review page (open it in a browser to see the preview): {request.url}", file=sys.stderr)
        approved = not sys.stdin.isatty() or input("Approve the watermark? [Y/n] ").strip().lower() in ("", "y", "yes")
        if isinstance(request, ElicitRequestURLParams):
            await decide_on_review_page(request.url, approved)
            return ElicitResult(action="accept")  # URL mode: "I went to the page"; the decision was taken there
        return ElicitResult(action="accept", content={"approved": approved})


async def decide_on_review_page(url: str, approved: bool) -> None:
    """Submit the review page's form as the person would (the link's `cap` is the page's credential; no token)."""
    cap = parse_qs(urlsplit(url).query)["cap"][0]
    form = {"cap": cap, "decision": "approve" if approved else "reject"}
    async with httpx2.AsyncClient(timeout=60, follow_redirects=True) as browser:  # back to the page, which shows it
        (await browser.post(url.split("?")[0], data=form)).raise_for_status()


async def render(args: argparse.Namespace, address: ServerAddress) -> None:
    async with httpx2.AsyncClient(headers=address.headers, timeout=300) as http:
        files = ServerFiles(http, address)  # POST /assets, GET /artifacts (vidforge_client/transfers.py)
        await files.check()
        arguments = {
            "source_asset_uri": (await files.upload(Path(args.source))).uri,
            "output_format": Path(args.output).suffix.lstrip(".") or "mp4",
            "resolution": args.resolution,
        }
        if args.watermark:
            logo = (await files.upload(Path(args.watermark))).uri
            arguments["watermark"] = {"image_asset_uri": logo, "position": "bottom_right", "opacity": 0.6}

        tasks = TasksExtension(Follower())
        transport = streamable_http_client(address.mcp_url, http_client=http)
        async with Client(transport, extensions=[tasks], elicitation_callback=tasks.elicitation_callback) as client:
            result = await client.call_tool("vidforge_render_video", arguments)  # returns when the task has ended

        if result.is_error:
            sys.exit(f"render failed: {json.dumps(result.structured_content)}")
        video_uri = result.structured_content["video_uri"]  # vidforge://videos/<render_id>/final.mp4
        size = await files.download(video_uri, Path(args.output))
        print(f"{video_uri} -> {args.output} ({size} bytes)")


def main() -> None:
    parser = argparse.ArgumentParser(description="Render a video with vidforge through the MCP Python SDK.")
    parser.add_argument("source", help="the video to render")
    parser.add_argument("--watermark", help="a PNG/JPEG to stamp on it (its approval is asked for)")
    parser.add_argument("--resolution", choices=["720p", "1080p", "4k"], default="720p")
    parser.add_argument("-o", "--output", default="final.mp4", help="where the video goes (its suffix: the format)")
    parser.add_argument("--server", help="the MCP endpoint (default: $VIDFORGE_URL or http://127.0.0.1:8000/mcp)")
    parser.add_argument("--token", help="bearer token (default: $VIDFORGE_TOKEN)")
    args = parser.parse_args()
    address = ServerAddress.of(args.server, args.token)
    try:
        asyncio.run(render(args, address))
    except Exception as exc:
        failure = failure_of(exc, address)  # e.g. "cannot reach http://…/mcp: is `vidforge serve` running? …"
        if failure is None:
            raise
        sys.exit(f"vidforge: {failure.message}")


if __name__ == "__main__":
    main()
