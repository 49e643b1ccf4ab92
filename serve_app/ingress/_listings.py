"""`GET /assets`, `GET /renders` and `GET /renders/{render_id}`: the caller's own assets and renders, newest first, a
page at a time. MCP 2026-07-28 has no `tasks/list`, so `vidforge assets list` and `vidforge renders list|get` read
these (vidforge_client).

Behind the same bearer auth as the file routes; a caller sees only what its principal owns, and another principal's
render answers exactly like an unknown one. `?limit=` bounds a page (default and cap: VIDFORGE_MAX_LIST_ITEMS);
`?cursor=` is the previous page's `next_cursor` (null on the last page). Renders come through the registry's
per-principal index (TaskRegistry.list_owned); assets from the media store's metadata listing, which each replica
caches (media_store.assets.AssetIndex.owned). A render is shown as the status tool shows it (mcp_protocol.views), with
when it was created and what was asked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mcp_protocol import errors
from mcp_protocol.domain import Succeeded, TaskRecord
from mcp_protocol.envelope import VidforgeError, repair
from mcp_protocol.json_types import JSONObject
from mcp_protocol.timefmt import iso_ms
from mcp_protocol.usage import usage_of
from mcp_protocol.views import render_status
from serve_app._config import Config
from serve_app.ingress._refusals import error_response

if TYPE_CHECKING:
    from serve_app.ingress.ray_render_service import RayRenderService

CURSOR_SEPARATOR = ","
Key = TypeVar("Key", int, float)  # what a listing sorts by, after its newest first: creation time


@dataclass(frozen=True)
class Page(Generic[Key]):
    """What one listing request asks for: how many items, and after which one (the sort key and id of the
    previous page's last item, from its cursor)."""

    limit: int
    before: tuple[Key, str] | None

    @classmethod
    def of(cls, request: Request, max_items: int, key_type: Callable[[str], Key]) -> Page[Key]:
        """`?limit=` (1 or more; above the cap it is the cap) and `?cursor=`; VidforgeError (invalid_argument)
        for anything else."""
        try:
            limit = min(int(request.query_params.get("limit", max_items)), max_items)
        except ValueError:
            limit = 0
        if limit < 1:
            raise _bad_query("limit", f"limit must be a whole number of at least 1 (at most {max_items})", max_items)
        cursor = request.query_params.get("cursor")
        if cursor is None:
            return cls(limit, None)
        key, _, item_id = cursor.partition(CURSOR_SEPARATOR)
        try:
            before = (key_type(key), item_id)
        except ValueError:
            before = None
        if before is None or not item_id:
            raise _bad_query("cursor", "cursor must be a next_cursor this listing answered", max_items)
        return cls(limit, before)


def _bad_query(field: str, reason: str, max_items: int) -> VidforgeError:
    return errors.invalid_argument(
        "The listing's query parameters are not valid.",
        field,
        f"{reason}; pages hold at most {max_items} items (VIDFORGE_MAX_LIST_ITEMS).",
        repair("list_from_newest", None, {"limit": max_items}, "Leave out `cursor` to start from the newest."),
    )


def _page(items: list[JSONObject], limit: int, last_key: str | None) -> JSONResponse:
    """A page: its items, and the cursor of the next one when this one is full (null: nothing more)."""
    return JSONResponse({"items": items, "next_cursor": last_key if len(items) == limit else None})


class Listings:
    def __init__(self, service: RayRenderService, config: Config) -> None:
        self.service = service
        self.max_items = config.max_list_items
        self.retention_s = config.result_retention_s

    def render_item(self, rec: TaskRecord) -> JSONObject:
        """The status tool's view of the render (mcp_protocol.views.render_status), with its creation and request,
        and a finished video's quality report (mcp_protocol.quality) and what it used (mcp_protocol.usage)."""
        item: JSONObject = {
            **render_status(rec, self.retention_s, self.service.review_url(rec), self.service.watch_url(rec)),
            "created_at": iso_ms(rec.created_at_ms),
            "request": rec.request.arguments(with_key=False),
        }
        if isinstance(rec.end, Succeeded) and (qc := rec.end.artifact.qc) is not None:
            item["qc"] = qc.to_json()
        if (usage := usage_of(rec)) is not None:
            item["usage"] = usage
        return item

    async def assets(self, request: Request) -> Response:
        try:
            page = Page.of(request, self.max_items, float)
        except VidforgeError as error:
            return error_response(400, error)
        principal = request.user.identity
        metas = await anyio.to_thread.run_sync(self.service.assets.index.owned, principal, page.limit, page.before)
        items: list[JSONObject] = [
            {
                "uri": f"vidforge://assets/{meta['asset_id']}",
                "kind": meta.get("kind"),
                "filename": meta.get("filename"),
                "size_bytes": meta.get("size_bytes"),
                "created_at": iso_ms(meta.get("created_at", 0.0) * 1000),
            }
            for meta in metas
        ]
        last = f"{metas[-1].get('created_at', 0.0)!r}{CURSOR_SEPARATOR}{metas[-1]['asset_id']}" if metas else None
        return _page(items, page.limit, last)

    async def renders(self, request: Request) -> Response:
        try:
            page = Page.of(request, self.max_items, int)
        except VidforgeError as error:
            return error_response(400, error)
        recs = await self.service.registry.list_owned(request.user.identity, page.limit, page.before)
        last = f"{recs[-1].created_at_ms}{CURSOR_SEPARATOR}{recs[-1].task_id}" if recs else None
        return _page([self.render_item(rec) for rec in recs], page.limit, last)

    async def render(self, request: Request) -> Response:
        render_id = request.path_params["render_id"]
        rec = await self.service.get_render(request.user.identity, render_id, fresh=True)
        if rec is None:
            return error_response(404, errors.render_not_found(render_id, self.retention_s))
        return JSONResponse(self.render_item(rec))


def listing_routes(service: RayRenderService, config: Config) -> list[Route]:
    listings = Listings(service, config)
    return [
        Route("/assets", listings.assets, methods=["GET"]),
        Route("/renders", listings.renders, methods=["GET"]),
        Route("/renders/{render_id}", listings.render, methods=["GET"]),
    ]
