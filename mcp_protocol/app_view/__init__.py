"""The render view: vidforge's MCP App (`io.modelcontextprotocol/ui`, MCP Apps 2026-01-26).

A host that renders MCP Apps shows this view beside a render's tool call: it follows the render, shows the watermark
preview beside the source frame with Approve and Reject, and plays the finished video. Its pieces on the wire:

- the resource `ui://vidforge/render` (`text/html;profile=mcp-app`): one self-contained HTML document, built from
  web/render-view/ by `make app-view` and shipped in this package (`render.html`), so `pip install` needs no Node.
  Its `_meta.ui.csp` names one origin, the server's own (`VIDFORGE_PUBLIC_URL`, else the bind address), which is
  where its signed media links point;
- `_meta.ui.resourceUri` on the tools whose calls it shows (`VIEW_TOOLS`);
- on `vidforge_get_render_status`, `_meta` `com.vidforge/view`: the live figures and the signed, per-render links the
  view loads (`ViewLinks`). The view calls the tools through the host's bridge, so it never holds a credential but
  those links.

Who sees them: a 2026-07-28 request that declares the extension with the MCP App MIME type (per request, as every
capability there); a request that does not sees exactly what it saw before. A 2025-era request always sees them:
the server is stateless, so the `initialize` that declared the extension is not known to the requests after it,
and those revisions let a client ignore `_meta` it does not know.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from importlib import resources
from urllib.parse import urlsplit

from mcp_protocol.catalog import INSPECT_TOOL, RENDER_TOOL, STATUS_TOOL
from mcp_protocol.domain import TaskRecord, TaskStatus
from mcp_protocol.json_types import JSONObject, with_meta_entry
from mcp_protocol.progress import RenderProgress

# The extension's identifier and its views' MIME type (the SDK's mcp.server.apps has them too; this module stays
# importable without the SDK, as the render driver and the actors that mint links are: tests/test_import_contract.py).
UI_EXTENSION = "io.modelcontextprotocol/ui"
VIEW_URI = "ui://vidforge/render"
VIEW_MIME = "text/html;profile=mcp-app"
VIEW_META_KEY = "com.vidforge/view"
# The tools whose calls the view shows: a render it follows, a status it follows, an inspection's facts.
VIEW_TOOLS = (RENDER_TOOL, STATUS_TOOL, INSPECT_TOOL)


@dataclass(frozen=True)
class ViewLinks:
    """The signed HTTP links of one render the view loads, each None where it does not apply: the preview and the
    source frame while an approval is outstanding (the review page's capability), the video's files once it is
    finished (the watch page's)."""

    preview: str | None = None
    source_frame: str | None = None
    video: str | None = None
    download: str | None = None
    poster: str | None = None
    contact_sheet: str | None = None
    hls: str | None = None

    def to_json(self) -> JSONObject:
        return {name: url for name, url in asdict(self).items() if url is not None}


@functools.cache
def view_html() -> str:
    """The built view (`make app-view` writes it)."""
    return resources.files(__package__).joinpath("render.html").read_text(encoding="utf-8")


def origin_of(base_url: str) -> str:
    """The web origin of the server's public base URL: what the view's CSP names."""
    parts = urlsplit(base_url)
    return f"{parts.scheme}://{parts.netloc}"


def view_resource() -> JSONObject:
    """The view's entry in `resources/list`."""
    return {
        "uri": VIEW_URI,
        "name": "render-view",
        "title": "vidforge render view",
        "description": "Follows a render, shows its watermark preview for approval, and plays the finished video.",
        "mimeType": VIEW_MIME,
    }


def view_contents(base_url: str) -> JSONObject:
    """The view's `resources/read` contents: the document, and the one origin it may load media from."""
    origin = origin_of(base_url)
    csp = {"connectDomains": [origin], "resourceDomains": [origin]}
    return {
        "uri": VIEW_URI,
        "mimeType": VIEW_MIME,
        "text": view_html(),
        "_meta": {"ui": {"csp": csp, "prefersBorder": True}},
    }


def with_view_meta(tools: list[JSONObject]) -> list[JSONObject]:
    """`tools` with `_meta.ui.resourceUri` on the ones the view shows (beside the `_meta` they have)."""

    linked = {"resourceUri": VIEW_URI}
    return [with_meta_entry(tool, "ui", linked) if tool["name"] in VIEW_TOOLS else tool for tool in tools]


def view_state(rec: TaskRecord, links: ViewLinks) -> JSONObject:
    """What the view shows of a render beside the status tool's structuredContent: the live figures the status text
    carries in words, and the links it loads."""
    progress = RenderProgress.of(rec)
    percent = 100 if rec.status is TaskStatus.COMPLETED else progress.percent
    figures: JSONObject = {"phase": rec.phase.value, "percent": percent, "fps": progress.fps, "eta_s": progress.eta_s}
    return {"progress": figures, "links": links.to_json()}
