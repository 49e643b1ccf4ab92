"""Issue 32 item 2: deadlines at the door, and shares of the request slots no slow caller can pass — over raw sockets
against a real `vidforge serve`.

The issue's probes: a dozen anonymous `POST /review/<id>` that send one body byte and stall, or a dozen of one
tenant's `POST /mcp` doing the same, held every request slot of the replica, and another tenant's `GET /healthz`
answered 503 for as long as they stalled. Here the replica has 4 slots; anonymous requests share 1 of them and each
principal may hold 2, so past its share a staller is refused at once, the stalled requests that got a slot are
answered 408 at the body deadline, another tenant's `/healthz`, `tools/list`, upload and render are answered
meanwhile, and the probes answer even with every slot held. A request whose headers stall gets 408 at the header
deadline, and a connection that sends nothing is closed. Every 408 is counted in `vidforge_refusals_total`, read
from the metrics endpoint the server prints.

The deadlines' arithmetic (the minimum rate) is checked in-process against the real HTTP front.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections import Counter

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from serve_app._config import Config
from serve_app.ingress._deadlines import BodyDeadline
from serve_app.ingress.front import HttpFront
from tests.harness import ServerProcess, Wire, free_port, upload, wait_until
from tests.media import make_clip
from tests.test_observability_live import metrics_urls

TOKENS = {"tok-slow-alice": "alice", "tok-slow-bob": "bob", "tok-slow-carol": "carol"}
SLOTS = 4
ANONYMOUS_SHARE = 1
PRINCIPAL_SHARE = 2
STALLERS = 12
BODY_TIMEOUT_S = 15  # far longer than sending a dozen requests takes, however loaded the machine
HEADER_TIMEOUT_S = 3
DEADLINE_S = 120
FORM = "application/x-www-form-urlencoded"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    env = {
        "VIDFORGE_MAX_ONGOING_REQUESTS": str(SLOTS),
        "VIDFORGE_MAX_QUEUED_REQUESTS": "2",
        "VIDFORGE_MAX_ANONYMOUS_REQUESTS": str(ANONYMOUS_SHARE),
        "VIDFORGE_MAX_PRINCIPAL_REQUESTS": str(PRINCIPAL_SHARE),
        "VIDFORGE_BODY_TIMEOUT_S": str(BODY_TIMEOUT_S),
        "VIDFORGE_HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S),
        "RAY_metrics_report_interval_ms": "1000",
    }
    with ServerProcess(tmp_path_factory.mktemp("slow") / "data", env=env, tokens=TOKENS) as proc:
        yield proc


class RawRequest:
    """A request written to a socket as given (headers, and maybe part of a body), then nothing more; its answer is
    read on a thread until the server closes the connection."""

    def __init__(self, port: int, data: bytes) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S)
        self.sock.sendall(data)
        self.raw: bytes | None = None
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    @classmethod
    def stalled_body(cls, port: int, path: str, headers: dict[str, str]) -> RawRequest:
        """A POST announcing a 100-byte body and sending its first byte only."""
        head = {"Host": f"127.0.0.1:{port}", "Connection": "close", "Content-Length": "100", **headers}
        lines = "".join(f"{name}: {value}\r\n" for name, value in head.items())
        return cls(port, f"POST {path} HTTP/1.1\r\n{lines}\r\n".encode() + b"x")

    def _read(self) -> None:
        chunks = []
        try:
            while chunk := self.sock.recv(65536):
                chunks.append(chunk)
        except TimeoutError:
            return  # no answer within DEADLINE_S: `raw` stays None
        except ConnectionResetError:
            pass  # a client still sending when the server closed gets a reset after the answer
        finally:
            self.sock.close()
        self.raw = b"".join(chunks)

    @property
    def answered(self) -> bool:
        return self.raw is not None

    def answer(self) -> tuple[int, str]:
        """(status, body) of the answer, once the server closed the connection."""
        self.reader.join(DEADLINE_S)
        assert self.raw is not None, f"no answer within {DEADLINE_S} s"
        assert self.raw, "the server closed the connection without an answer"
        head, _, body = self.raw.partition(b"\r\n\r\n")
        return int(head.split(b" ", 2)[1]), body.decode()


def answers(requests: list[RawRequest]) -> Counter[int]:
    return Counter(request.answer()[0] for request in requests)


def refusals(server: ServerProcess) -> Counter[str]:
    """`vidforge_refusals_total` by limit, summed over every series the server's metrics endpoints show."""
    counts: Counter[str] = Counter()
    for url in metrics_urls(server):
        for family in text_string_to_metric_families(httpx.get(url, timeout=30).text):
            for sample in family.samples:
                if sample.name.removeprefix("ray_") == "vidforge_refusals_total":
                    counts[sample.labels["limit"]] += int(sample.value)
    return counts


def counted(server: ServerProcess, limit: str, at_least: int) -> None:
    wait_until(
        lambda: refusals(server)[limit] >= at_least, DEADLINE_S, interval=1, message=f"{at_least} {limit} refusals"
    )


def envelope_reason(body: str) -> str:
    """The reason in a JSON-RPC error's envelope (`/mcp`'s carrier)."""
    return json.loads(body)["error"]["data"]["details"]["reason"]


def stall_as(port: int, token: str | None, path: str, count: int) -> list[RawRequest]:
    if token is None:
        return [RawRequest.stalled_body(port, path, {"Content-Type": FORM}) for _ in range(count)]
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    return [RawRequest.stalled_body(port, path, headers) for _ in range(count)]


@pytest.mark.ray
def test_slow_bodies_hold_only_their_share_and_end_in_408_while_another_tenant_is_served(server, tmp_path):
    """The issue's two probes at once: a dozen anonymous stalled review decisions and a dozen of alice's stalled
    `/mcp` requests. Past their shares they are refused at once; bob is served meanwhile; the stalled requests in a
    slot are answered 408 at the body deadline, and counted."""
    clip = make_clip(str(tmp_path / "clip.mp4"), seconds=1.0, width=160, height=90, audio=False)
    anonymous = stall_as(server.port, None, "/review/task_probe", STALLERS)
    alices = stall_as(server.port, "tok-slow-alice", "/mcp", STALLERS)
    stallers = anonymous + alices
    refused = STALLERS - ANONYMOUS_SHARE + STALLERS - PRINCIPAL_SHARE
    wait_until(lambda: sum(r.answered for r in stallers) >= refused, DEADLINE_S, message="the refusals past the shares")

    bob = Wire(server.url, token="tok-slow-bob", tasks=True)
    try:
        health = httpx.get(f"{server.base}/healthz", headers={"Authorization": "Bearer tok-slow-bob"}, timeout=60)
        assert health.status_code == 200, health.text
        assert bob.result("tools/list")["tools"]
        source = upload(server, clip, token="tok-slow-bob")
        created = bob.tool(
            "vidforge_render_video", {"source_asset_uri": source, "output_format": "mp4", "resolution": "720p"}
        )
        assert created["resultType"] == "task", created
    finally:
        bob.close()

    assert answers(anonymous) == {503: STALLERS - ANONYMOUS_SHARE, 408: ANONYMOUS_SHARE}
    for request in anonymous:  # the review page's carrier: a page a person reads, naming the setting
        status, body = request.answer()
        assert ("VIDFORGE_MAX_ANONYMOUS_REQUESTS" if status == 503 else "VIDFORGE_BODY_TIMEOUT_S") in body, body
    assert answers(alices) == {429: STALLERS - PRINCIPAL_SHARE, 408: PRINCIPAL_SHARE}
    for request in alices:
        status, body = request.answer()
        data = json.loads(body)["error"]["data"]
        if status == 429:
            assert data["machine_code"] == "concurrency_limit_exceeded"
            assert "VIDFORGE_MAX_PRINCIPAL_REQUESTS" in data["details"]["reason"]
        else:
            assert (data["machine_code"], data["temporary"]) == ("internal_error", True)
            assert "VIDFORGE_BODY_TIMEOUT_S" in data["details"]["reason"]
    counted(server, "body_timeout", ANONYMOUS_SHARE + PRINCIPAL_SHARE)
    counted(server, "anonymous", STALLERS - ANONYMOUS_SHARE)


@pytest.mark.ray
def test_probes_answer_with_every_slot_held_and_a_stalled_upload_leaves_nothing(server):
    """alice stalls an `/mcp` request and an upload, carol two `/mcp` requests: all four slots are held, and
    `/healthz` and `/readyz` still answer 200. The upload's 408 comes after its partial file is gone."""
    assets = server.data_dir / "assets"
    stored_before = sorted(assets.rglob("*"))
    stallers = stall_as(server.port, "tok-slow-alice", "/mcp", 1)
    stallers += stall_as(server.port, "tok-slow-alice", "/assets?filename=slow.mp4", 1)
    stallers += stall_as(server.port, "tok-slow-carol", "/mcp", PRINCIPAL_SHARE)
    bob = {"Authorization": "Bearer tok-slow-bob"}
    for path in ("/healthz", "/readyz"):
        response = httpx.get(f"{server.base}{path}", headers=bob, timeout=60)
        assert response.status_code == 200, (path, response.text)
    assert answers(stallers) == {408: SLOTS}
    status, body = stallers[1].answer()
    assert "VIDFORGE_BODY_TIMEOUT_S" in json.loads(body)["error"]["details"]["reason"]  # the file routes' carrier
    assert [path for path in sorted(assets.rglob("*")) if path not in stored_before] == []


@pytest.mark.ray
def test_stalled_headers_get_408_and_a_silent_connection_is_closed(server):
    before = refusals(server)["header_timeout"]
    stalled = RawRequest(server.port, f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n".encode())
    silent = RawRequest(server.port, b"")
    status, body = stalled.answer()
    assert status == 408, body
    envelope = json.loads(body)["error"]
    assert (envelope["code"], envelope["details"]["field"]) == ("internal_error", "headers")
    assert "VIDFORGE_HEADER_TIMEOUT_S" in envelope["details"]["reason"]
    silent.reader.join(DEADLINE_S)
    assert silent.raw == b"", silent.raw
    counted(server, "header_timeout", before + 1)


# -- the minimum rate, in-process against the real HTTP front -------------------------------------------------------


async def body_length(request: Request) -> JSONResponse:
    return JSONResponse({"bytes": len(await request.body())})


@pytest.fixture
def front():
    """The HTTP front serving one body-reading route behind `BodyDeadline`: 5 s of grace, then 100 bytes/s."""
    config = Config(body_timeout_s=5.0, body_min_bytes_per_s=100)
    app = Starlette(
        routes=[Route("/mcp", body_length, methods=["POST"])], middleware=[Middleware(BodyDeadline, config=config)]
    )
    port = free_port()
    http = HttpFront(app, "127.0.0.1", port, header_timeout_s=5.0)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(http.start(), loop).result(DEADLINE_S)
    yield port
    http.stop()
    wait_until(lambda: not http.alive(), DEADLINE_S, message="the front to stop")
    loop.call_soon_threadsafe(loop.stop)
    thread.join(DEADLINE_S)


def test_a_body_trickling_below_the_minimum_rate_gets_408_though_it_never_idles_long(front):
    """A byte every 0.1 s keeps each wait far below the 5 s idle deadline, which alone would let the trickle hold
    its slot for good; past the grace the body must average 100 bytes/s, so the trickle is answered 408 before its
    10 000 bytes are in. The same route serves a body sent at once."""
    whole = RawRequest.stalled_body(front, "/mcp", {"Content-Length": "100"})
    whole.sock.sendall(b"y" * 99)
    assert whole.answer() == (200, '{"bytes":100}')

    trickle = RawRequest.stalled_body(front, "/mcp", {"Content-Length": "10000"})
    sent = 1
    while not trickle.answered and sent < 10_000:
        trickle.reader.join(0.1)  # the client's pace: at most 10 bytes/s
        if trickle.answered:
            break
        try:
            trickle.sock.sendall(b"z")
        except OSError:  # answered and closed meanwhile
            break
        sent += 1
    status, body = trickle.answer()
    assert status == 408, body
    assert "VIDFORGE_BODY_MIN_BYTES_PER_S" in envelope_reason(body)
    assert sent < 10_000
