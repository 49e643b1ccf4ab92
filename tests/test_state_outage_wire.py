"""What a client meets while the task state is out of reach, on the production wire (tests/fast_wire.py) over a real
PostgreSQL server that is stopped: the contract's temporary `internal_error` on every carrier — a tool error, a
JSON-RPC error with the envelope in `data` (never a bare -32603), HTTP 503 with `Retry-After` — naming the database
but not its password; and the same calls succeed once the server is back."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from serve_app.ingress._http_errors import EXCEPTION_HANDLERS
from tests import postgres
from tests.fast_wire import FastWire, fast_wire
from tests.harness import validate, wait_until

pytestmark = pytest.mark.slow  # a PostgreSQL server of its own, stopped and started

RENDER = "vidforge_render_video"
STATUS = "vidforge_get_render_status"
TASK_ID = "task_" + "a" * 26


@pytest.fixture
def server() -> Iterator[postgres.PostgresServer]:
    own = postgres.PostgresServer()
    yield own
    own.stop()


def temporary(envelope: dict, password: str) -> None:
    assert envelope["code" if "code" in envelope else "machine_code"] == "internal_error", envelope
    assert envelope["temporary"] is True and envelope["retry_after_ms"] >= 1000, envelope
    assert "task state is unavailable" in envelope["details"]["reason"], envelope
    assert password not in str(envelope)


def test_every_carrier_answers_the_temporary_envelope_while_the_database_is_down(server, tmp_path):
    url = server.new_database()
    server.stop_server()
    with fast_wire(tmp_path, state_url=url, state_timeout_s=1.0, state_retry_max_s=0.5) as wire:
        media = wire.upload_media()
        arguments = {"source_asset_uri": media.video, "output_format": "mp4", "resolution": "720p"}

        refused = wire.tool(RENDER, arguments)  # the plain tool era: a tool error
        assert refused["isError"] is True
        temporary(refused["structuredContent"], server.password)

        answer = wire.task("tasks/get", TASK_ID)  # the tasks era: a JSON-RPC error, the envelope in `data`
        validate(answer, "core", "JSONRPCErrorResponse")
        assert answer["error"]["code"] == -32603
        temporary(answer["error"]["data"], server.password)

        status = wire.tool(STATUS, {"render_id": TASK_ID})
        temporary(status["structuredContent"], server.password)

        response = wire.run(asgi_get(registry_route(wire), "/records"))
        assert response.status_code == 503 and int(response.headers["retry-after"]) >= 1
        temporary(response.json()["error"], server.password)

        server.start_server()
        wait_until(lambda: not wire.tool(RENDER, arguments).get("isError"), 60, 0.2, "a render accepted again")
        created = wire.tool(RENDER, arguments, tasks=True)
        assert wire.task("tasks/get", created["taskId"])["result"]["status"] == "working"


def registry_route(wire: FastWire) -> Starlette:
    """An HTTP route that needs the task state, behind the server's own exception handlers."""

    async def records(request: Request) -> JSONResponse:
        owned = await wire.registry.list_owned("alice", 10)
        return JSONResponse([rec.task_id for rec in owned])

    return Starlette(routes=[Route("/records", records)], exception_handlers=EXCEPTION_HANDLERS)


async def asgi_get(app: Starlette, path: str) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        return await client.get(path)
