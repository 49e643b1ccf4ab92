"""`vidforge assets list`, `vidforge renders list`, `vidforge renders get ID` and `vidforge webhooks list`: the caller's
own assets, renders and webhook deliveries (the server shows nobody else's), newest first, as a table; with `--json`, exactly what the server answered, for
scripts. Times are shown in the local zone."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import httpx2
from rich.console import Console
from rich.table import Table

from vidforge_client.address import ServerAddress
from vidforge_client.transfers import Listed, ServerFiles

PIPE_WIDTH = 240  # a table piped to a file or a pager is not cut to 80 columns
TIMEOUT_S = 60.0


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
        files = ServerFiles(http, address)
        page = await files.listing(listed, limit)
    if as_json:
        print(json.dumps({"items": page.items, "next_cursor": page.next_cursor}, indent=2))
        return
    console = _stdout()
    tables = {"assets": assets_table, "renders": renders_table, "webhooks": webhooks_table}
    console.print(tables[listed](page.items))
    if page.next_cursor is not None:
        console.print(f"(the newest {len(page.items)}; more with --limit)", style="dim")


async def show_render(address: ServerAddress, render_id: str, as_json: bool) -> None:
    async with httpx2.AsyncClient(headers=address.headers, timeout=TIMEOUT_S) as http:
        item = await ServerFiles(http, address).render(render_id)
    if as_json:
        print(json.dumps(item, indent=2))
        return
    _stdout().print(render_table(item))


def assets_table(items: list[dict[str, Any]]) -> Table:
    table = Table("asset", "kind", "file", "bytes", "uploaded", title=f"{len(items)} assets")
    for item in items:
        table.add_row(
            item["uri"], item["kind"], item["filename"], str(item["size_bytes"]), local_time(item["created_at"])
        )
    return table


def webhooks_table(items: list[dict[str, Any]]) -> Table:
    table = Table(
        "event", "render", "state", "attempts", "created", "next attempt", "last error", title=f"{len(items)} webhooks"
    )
    for item in items:
        table.add_row(
            item["type"],
            item["render_id"],
            item["state"],
            str(item["attempts"]),
            local_time(item["created_at"]),
            local_time(item.get("next_attempt_at")),
            item.get("last_error") or "",
        )
    return table


def _output(item: dict[str, Any]) -> str:
    request = item.get("request", {})
    watermark = " + watermark" if request.get("watermark") else ""
    return f"{request.get('resolution', '')} {request.get('output_format', '')}{watermark}".strip()


def _outcome(item: dict[str, Any]) -> str:
    if "video_uri" in item:
        return str(item["video_uri"])
    if item.get("error"):
        return str(item["error"].get("code", ""))
    return ""


def _progress(item: dict[str, Any]) -> str:
    fraction = item.get("progress")
    return f"{int(fraction * 100)}%" if fraction is not None else ""


def renders_table(items: list[dict[str, Any]]) -> Table:
    table = Table("render", "state", "progress", "created", "output", "video / error", title=f"{len(items)} renders")
    for item in items:
        table.add_row(
            item["render_id"],
            item["state"],
            _progress(item),
            local_time(item.get("created_at")),
            _output(item),
            _outcome(item),
        )
    return table


def render_table(item: dict[str, Any]) -> Table:
    table = Table("", "", show_header=False, title=item["render_id"])
    rows = [
        ("state", item["state"]),
        ("progress", _progress(item)),
        ("status", item.get("status_message", "")),
        ("created", local_time(item.get("created_at"))),
        ("source", item.get("request", {}).get("source_asset_uri", "")),
        ("output", _output(item)),
        ("video / error", _outcome(item)),
        ("size", str(item["size_bytes"]) if "size_bytes" in item else ""),
        ("expires", local_time(item.get("expires_at"))),
    ]
    for name, value in rows:
        if value:
            table.add_row(name, value)
    return table
