"""From a link to a finished video over MCP alone, with the official `mcp` Python SDK (2.3) as the client.

    python examples/import_and_render.py https://media.example/clip.mp4 [--watermark https://media.example/logo.png]
        [--resolution 720p] [--format mp4] [--server http://127.0.0.1:8000/mcp] [--token TOKEN]

What an agent in a chat host does when its user pastes a link: `vidforge_import_asset` turns the link (and the
watermark's, when given) into an asset, `vidforge_render_video` renders it; when a watermark needs the person's
approval the script prints the review page's link and waits while they decide there, in a browser; then it prints
the result's links. The script itself makes no HTTP request: every byte moves between vidforge and the link's host,
or stays on the server behind the links it prints.

The calls run as tasks (the io.modelcontextprotocol/tasks extension, added to the SDK by vidforge's client package
through the SDK's public extension hooks: vidforge_client/tasks.py), so `call_tool` follows each task to its end.
--token defaults to $VIDFORGE_TOKEN (none when the server has no tokens file), --server to $VIDFORGE_URL or
http://127.0.0.1:8000/mcp.
"""

import argparse
import asyncio
import sys

import httpx2  # the SDK's HTTP library, handed to its transport
from mcp import Client
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, ElicitRequestURLParams, ElicitResult

from vidforge_client.address import ServerAddress
from vidforge_client.failures import failure_of
from vidforge_client.tasks import ElicitParams, TasksExtension, TaskState


class Follower:
    """Shows each task's progress, and hands the watermark approval to the person."""

    def __init__(self) -> None:
        self.last = ""

    def started(self, task_id: str) -> None:
        print(f"task {task_id}: started", file=sys.stderr)

    def polled(self, state: TaskState) -> None:
        line = f"task {state.task_id}: {state.status}: {state.status_message}"
        if line != self.last:
            self.last = line
            print(line, file=sys.stderr)

    async def answer(self, state: TaskState, request: ElicitParams, session: ClientSession) -> ElicitResult | None:
        if isinstance(request, ElicitRequestURLParams):
            # The decision is the person's, on the review page; the task goes on once they have made it.
            print(f"Review the watermark and decide in a browser: {request.url}", file=sys.stderr, flush=True)
            return None
        print(request.message, file=sys.stderr)  # a server that mints no review links asks in a form
        approved = not sys.stdin.isatty() or input("Approve the watermark? [Y/n] ").strip().lower() in ("", "y", "yes")
        return ElicitResult(action="accept", content={"approved": approved})


def structured(result: CallToolResult, what: str) -> dict:
    if result.is_error:
        sys.exit(f"{what} failed: {result.structured_content}")
    return result.structured_content


async def run(args: argparse.Namespace, address: ServerAddress) -> None:
    tasks = TasksExtension(Follower())
    async with (
        httpx2.AsyncClient(headers=address.headers, timeout=300) as http,
        Client(
            streamable_http_client(address.mcp_url, http_client=http),
            extensions=[tasks],
            elicitation_callback=tasks.elicitation_callback,
        ) as client,
    ):
        source = structured(await client.call_tool("vidforge_import_asset", {"url": args.link}), "import")
        print(f"imported {args.link} as {source['asset_uri']}", file=sys.stderr)
        arguments = {**source["follow_up"]["arguments"], "output_format": args.format, "resolution": args.resolution}
        if args.watermark:
            logo = structured(await client.call_tool("vidforge_import_asset", {"url": args.watermark}), "import")
            arguments["watermark"] = {"image_asset_uri": logo["asset_uri"], "position": "bottom_right"}
        result = await client.call_tool("vidforge_render_video", arguments)  # returns when the task has ended
    video = structured(result, "render")
    print(f"{video['video_uri']} ({video['size_bytes']} bytes, {video['resolution']})")
    for item in result.content:  # the result's links: the video resource, and a link a person can open
        if item.type == "resource_link":
            print(f"{item.uri}: {item.description}")
        elif item.type == "text":
            print(item.text)


def main() -> None:
    parser = argparse.ArgumentParser(description="Import a video from a link and render it, over MCP alone.")
    parser.add_argument("link", help="the video's https:// link")
    parser.add_argument("--watermark", help="a PNG/JPEG's https:// link to stamp on it (its approval is asked for)")
    parser.add_argument("--resolution", choices=["720p", "1080p", "4k"], default="720p")
    parser.add_argument("--format", choices=["mp4", "webm", "mov"], default="mp4")
    parser.add_argument("--server", help="the MCP endpoint (default: $VIDFORGE_URL or http://127.0.0.1:8000/mcp)")
    parser.add_argument("--token", help="bearer token (default: $VIDFORGE_TOKEN)")
    args = parser.parse_args()
    address = ServerAddress.of(args.server, args.token)
    try:
        asyncio.run(run(args, address))
    except Exception as exc:
        failure = failure_of(exc, address)  # e.g. "cannot reach http://…/mcp: is `vidforge serve` running? …"
        if failure is None:
            raise
        sys.exit(f"vidforge: {failure.message}")


if __name__ == "__main__":
    main()
