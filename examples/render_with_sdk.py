"""Render a watermarked video with vidforge, using the official `mcp` Python SDK client (mcp 2.3).

    VIDFORGE_URL=http://127.0.0.1:8000/mcp VIDFORGE_TOKEN=... \\
        python examples/render_with_sdk.py clip.mp4 logo.png [out.mp4]

Uploads both files (POST /assets), calls vidforge_render_video as a task (the io.modelcontextprotocol/tasks
extension), answers the watermark approval through tasks/update, and downloads the video (GET /artifacts). The SDK's
client declares both elicitation modes, so vidforge asks for the approval in URL mode: the decision belongs on its
review page (the link a person opens in a browser). Standing in for that person, the script asks at the terminal
(unattended, it approves) and submits the answer on the page, then tells the server it went there (accept).
VIDFORGE_TOKEN is the bearer token from the server's tokens file; leave it unset when the server has none.
"""

import asyncio
import os
import sys
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

import httpx2  # the SDK's HTTP library
from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.streamable_http import streamable_http_client
from mcp_types import (
    CallToolResult,
    ElicitRequestFormParams,
    ElicitRequestURLParams,
    ElicitResult,
    EmptyResult,
    Request,
    RequestParams,
    Result,
)

URL = os.environ.get("VIDFORGE_URL", "http://127.0.0.1:8000/mcp")
TOKEN = os.environ.get("VIDFORGE_TOKEN")
HEADERS = {"Authorization": f"Bearer {TOKEN}"} if TOKEN else {}
BASE = URL.removesuffix("/mcp")


class CreatedTask(Result):  # what tools/call answers when the call became a task
    result_type: Literal["task"]
    task_id: str


class TaskState(Result):  # what tasks/get answers
    task_id: str
    status: str
    status_message: str | None = None
    poll_interval_ms: int = 1000
    input_requests: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class TaskParams(RequestParams):
    task_id: str
    input_responses: dict[str, Any] | None = None


class TaskRequest(Request[TaskParams, str]):  # tasks/get, tasks/update
    name_param = "taskId"  # sent as the Mcp-Name header, as the tasks extension requires


async def ask_human(context: Any, params: ElicitRequestFormParams | ElicitRequestURLParams) -> ElicitResult:
    """The watermark approval. Passing it as `elicitation_callback` also declares the elicitation capability."""
    print(params.message, file=sys.stderr)
    if isinstance(params, ElicitRequestURLParams):
        print(f"Review page (open it in a browser to see the preview): {params.url}", file=sys.stderr)
    approved = not sys.stdin.isatty() or input("Approve the watermark? [Y/n] ").strip().lower() in ("", "y", "yes")
    if isinstance(params, ElicitRequestURLParams):
        await decide_on_review_page(params.url, approved)
        return ElicitResult(action="accept")  # URL mode: "I went to the page"; the decision was taken there
    return ElicitResult(action="accept", content={"approved": approved})


async def decide_on_review_page(url: str, approved: bool) -> None:
    """Submit the review page's form as the person would (the link's `cap` is the page's credential; no token)."""
    cap = parse_qs(urlsplit(url).query)["cap"][0]
    form = {"cap": cap, "decision": "approve" if approved else "reject"}
    async with httpx2.AsyncClient(timeout=60, follow_redirects=True) as browser:  # back to the page, which shows it
        (await browser.post(url.split("?")[0], data=form)).raise_for_status()


async def run_task(created: CreatedTask, ctx: ClaimContext) -> CallToolResult:
    """Poll tasks/get until the task ends; answer its questions (elicitations) through tasks/update."""
    while True:
        get = TaskRequest(method="tasks/get", params=TaskParams(task_id=created.task_id))
        task = await ctx.session.send_request(get, TaskState)
        print(f"task {task.task_id}: {task.status}", file=sys.stderr)
        if task.status == "completed":
            return CallToolResult.model_validate(task.result)
        if task.status in ("failed", "cancelled"):
            sys.exit(f"render {task.status}: {task.error or task.status_message}")
        if task.status == "input_required" and task.input_requests:
            answers = {}
            for key, request in task.input_requests.items():  # {"method": "elicitation/create", "params": ...}
                mode = ElicitRequestURLParams if request["params"].get("mode") == "url" else ElicitRequestFormParams
                answer = await ask_human(None, mode.model_validate(request["params"]))
                answers[key] = answer.model_dump(exclude_none=True)
            update = TaskParams(task_id=task.task_id, input_responses=answers)
            await ctx.session.send_request(TaskRequest(method="tasks/update", params=update), EmptyResult)
            continue  # answered: look again at once
        await asyncio.sleep(task.poll_interval_ms / 1000)


class Tasks(ClientExtension):  # declares io.modelcontextprotocol/tasks on every request
    identifier = "io.modelcontextprotocol/tasks"

    def claims(self):
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=run_task)]


async def main(clip: str, logo: str, out: str) -> None:
    async with httpx2.AsyncClient(headers=HEADERS, timeout=300) as http:

        async def upload(path: str) -> str:  # -> vidforge://assets/<id>
            response = await http.post(
                f"{BASE}/assets", params={"filename": Path(path).name}, content=Path(path).read_bytes()
            )
            return response.raise_for_status().json()["uri"]

        source, watermark = await upload(clip), await upload(logo)
        transport = streamable_http_client(URL, http_client=http)
        async with Client(transport, extensions=[Tasks()], elicitation_callback=ask_human) as client:
            result = await client.call_tool(
                "vidforge_render_video",
                {
                    "source_asset_uri": source,
                    "output_format": "mp4",
                    "resolution": "720p",
                    "watermark": {"image_asset_uri": watermark, "position": "bottom_right", "opacity": 0.6},
                },
            )
        if result.is_error:
            sys.exit(f"render failed: {result.structured_content}")
        video_uri = result.structured_content["video_uri"]  # vidforge://videos/<render_id>/final.mp4
        download = await http.get(f"{BASE}/artifacts/{video_uri.removeprefix('vidforge://videos/')}")
        Path(out).write_bytes(download.raise_for_status().content)
        print(f"{video_uri} -> {out} ({len(download.content)} bytes)")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "final.mp4"))
