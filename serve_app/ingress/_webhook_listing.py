"""`GET /webhooks`: the caller's own webhook deliveries, newest event first, a page at a time (`vidforge webhooks
list`): what each event is, where it goes, and where its delivery stands — delivered, pending (with the next
attempt's time) or given up — with its attempts and the last error, in the dispatcher's words. Behind the same
bearer auth and paging as `GET /renders` (serve_app/ingress/_listings.py); never a secret or a signature."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mcp_protocol.envelope import VidforgeError
from mcp_protocol.json_types import JSONObject
from mcp_protocol.timefmt import iso_ms
from mcp_protocol.webhook_events import Delivery, DeliveryState
from serve_app._config import Config
from serve_app.ingress._listings import CURSOR_SEPARATOR, Page
from serve_app.ingress._refusals import error_response
from serve_app.webhooks.outbox import Outbox


def delivery_item(delivery: Delivery) -> JSONObject:
    event = delivery.event
    pending = delivery.state is DeliveryState.PENDING
    return {
        "event_id": event.event_id,
        "type": event.type.value,
        "render_id": event.task_id,
        "url": event.url,
        "created_at": iso_ms(event.created_at_ms),
        "state": delivery.state.value,
        "attempts": delivery.attempts,
        "last_attempt_at": iso_ms(delivery.last_attempt_at_ms) if delivery.last_attempt_at_ms is not None else None,
        "next_attempt_at": iso_ms(delivery.next_attempt_at_ms) if pending else None,
        "last_error": delivery.last_error,
    }


def webhook_routes(outbox: Outbox, config: Config) -> list[Route]:
    max_items = config.max_list_items

    async def deliveries(request: Request) -> Response:
        try:
            page = Page.of(request, max_items, int)
        except VidforgeError as error:
            return error_response(400, error)
        found = await outbox.list_deliveries(request.user.identity, page.limit, page.before)
        last = found[-1].event if found else None
        cursor = f"{last.created_at_ms}{CURSOR_SEPARATOR}{last.event_id}" if last is not None else None
        items = [delivery_item(delivery) for delivery in found]
        return JSONResponse({"items": items, "next_cursor": cursor if len(items) == page.limit else None})

    return [Route("/webhooks", deliveries, methods=["GET"])]
