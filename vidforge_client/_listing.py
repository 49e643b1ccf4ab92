"""`vidforge assets list`, `vidforge renders list`, `vidforge renders get ID` and `vidforge webhooks list`: the caller's
own assets, renders and webhook deliveries (the server shows nobody else's), newest first, as a table; with `--json`, exactly what the server answered, for
scripts. Times are shown in the local zone. `renders get` shows a finished video's quality check too: the verdict, its
reasons, and the loudness and fidelity figures (vidforge_client._quality)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

import httpx2
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from mcp_protocol.answers import AssetItem, DeliveryItem, ListingPage, RenderItem
from vidforge_client.address import ServerAddress
from vidforge_client.failures import read_as
from vidforge_client.transfers import Listed, ServerFiles

PIPE_WIDTH = 240  # a table piped to a file or a pager is not cut to 80 columns
TIMEOUT_S = 60.0

if TYPE_CHECKING:
    from vidforge_client._quality import QualityAnswer

ItemT = TypeVar("ItemT", bound=BaseModel)


def local_time(iso: str | None) -> str:
    """An RFC 3339 UTC time of the wire, in this machine's zone."""
    if not iso:
        return ""
    return datetime.fromisoformat(iso).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def _stdout() -> Console:
    console = Console()
    return console if console.is_terminal else Console(width=PIPE_WIDTH)


async def list_items(address: ServerAddress, listed: Listed, limit: int | None, as_json: bool) -> None:
    async with httpx2.AsyncClient(headers=address.headers, timeout=TIMEOUT_S) as http:
        body = await ServerFiles(http, address).listing(listed, limit)
    if as_json:
        print(json.dumps(body, indent=2))
        return
    what = f"GET /{listed}"
    if listed == "assets":
        _show_page(read_as(ListingPage[AssetItem], body, what), assets_table)
    elif listed == "renders":
        _show_page(read_as(ListingPage[RenderItem], body, what), renders_table)
    else:
        _show_page(read_as(ListingPage[DeliveryItem], body, what), webhooks_table)


def _show_page(page: ListingPage[ItemT], table: Callable[[list[ItemT]], Table]) -> None:
    console = _stdout()
    console.print(table(page.items))
    if page.next_cursor is not None:
        console.print(f"(the newest {len(page.items)}; more with --limit)", style="dim")


async def show_render(address: ServerAddress, render_id: str, as_json: bool) -> None:
    async with httpx2.AsyncClient(headers=address.headers, timeout=TIMEOUT_S) as http:
        body = await ServerFiles(http, address).render(render_id)
    print_render(body, render_id, as_json)


def print_render(body: object, render_id: str, as_json: bool) -> None:
    """`GET /renders/{render_id}`'s answer on stdout: as a table, or as the server's JSON."""
    if as_json:
        print(json.dumps(body, indent=2))
        return
    # Here: the quality check's reading loads the MCP types, which no listing needs.
    from vidforge_client._quality import CheckedRender

    item = read_as(CheckedRender, body, f"GET /renders/{render_id}")
    _stdout().print(render_table(item, item.qc))


def assets_table(items: list[AssetItem]) -> Table:
    table = Table("asset", "kind", "file", "bytes", "uploaded", title=f"{len(items)} assets")
    for item in items:
        table.add_row(item.uri, item.kind, item.filename, str(item.size_bytes), local_time(item.created_at))
    return table


def webhooks_table(items: list[DeliveryItem]) -> Table:
    table = Table(
        "event", "render", "state", "attempts", "created", "next attempt", "last error", title=f"{len(items)} webhooks"
    )
    for item in items:
        table.add_row(
            item.type,
            item.render_id,
            item.state,
            str(item.attempts),
            local_time(item.created_at),
            local_time(item.next_attempt_at),
            item.last_error or "",
        )
    return table


def _output(item: RenderItem) -> str:
    request = item.request
    watermark = " + watermark" if request.watermark is not None else ""
    return f"{request.resolution} {request.output_format}{watermark}".strip()


def _outcome(item: RenderItem) -> str:
    if item.video_uri is not None:
        return item.video_uri
    if item.error is not None:
        return item.error.code
    return ""


def _progress(item: RenderItem) -> str:
    fraction = item.progress
    return f"{int(fraction * 100)}%" if fraction is not None else ""


def renders_table(items: list[RenderItem]) -> Table:
    table = Table("render", "state", "progress", "created", "output", "video / error", title=f"{len(items)} renders")
    for item in items:
        table.add_row(
            item.render_id,
            item.state,
            _progress(item),
            local_time(item.created_at),
            _output(item),
            _outcome(item),
        )
    return table


def render_table(item: RenderItem, quality: QualityAnswer | None = None) -> Table:
    """One render, a row per fact it has (`quality`: its video's quality check, when it had one)."""
    table = Table("", "", show_header=False, title=item.render_id)
    rows = [
        ("state", item.state),
        ("progress", _progress(item)),
        ("status", item.status_message),
        ("created", local_time(item.created_at)),
        ("source", item.request.source_asset_uri),
        ("output", _output(item)),
        ("video / error", _outcome(item)),
        ("size", str(item.size_bytes) if item.size_bytes is not None else ""),
        ("expires", local_time(item.expires_at)),
    ]
    if (usage := item.usage) is not None:
        rows += [("render time", f"{usage.render_seconds:.1f} s"), ("CPU time", f"{usage.cpu_seconds:.1f} s")]
    if quality is not None:
        rows += [("quality check", quality.verdict), ("reasons", "\n".join(quality.reasons)), *quality.figures()]
    for name, value in rows:
        if value:
            table.add_row(name, value)
    return table
