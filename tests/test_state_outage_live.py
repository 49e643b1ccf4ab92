"""A real `vidforge serve` on a real PostgreSQL server that goes away mid-batch and comes back: stopped and started
again, as a minor-version upgrade or a managed database's maintenance window does; killed and recovered; hung behind
a link that stalls every byte; or failed over to its promoted standby. Three renders with webhooks are encoding when the database
goes; while it is away nothing answers without the contract's envelope (tasks/get, the tools, the HTTP routes), and
`/readyz` says `state: unavailable`; once it is back, service returns on its own, every render completes
frame-exact, and each webhook event is delivered once. Short clips: the renders take seconds."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests import postgres
from tests.harness import TERMINAL, ServerProcess, Wire, poll_task, upload, wait_until
from tests.https_origin import CertificateAuthority
from tests.media import decode_all, make_clip
from tests.stall_proxy import StallProxy
from tests.test_webhooks import Receiver

pytestmark = pytest.mark.ray

RENDER = "vidforge_render_video"
TOKEN, PRINCIPAL, SECRET = "tok-outage", "outage", "whsec_outage"
BACK_S = 60  # service back after the database is: the bound is 30 s, doubled for a loaded 2-core machine
RENDERS = 3


@pytest.fixture(scope="module")
def database() -> Iterator[postgres.PostgresServer]:
    """A server of this module's own, which its tests stop and start; each test renders into a database of its
    own on it. The failover, whose primary stays down, comes last; a test that ended with it down starts it again."""
    own = postgres.PostgresServer()
    yield own
    own.stop()


def outage_server(tmp_path: Path, ca: CertificateAuthority, state_url: str) -> ServerProcess:
    secrets = tmp_path / "webhook-secrets.json"
    secrets.write_text(json.dumps({PRINCIPAL: [SECRET]}))
    env = {
        "VIDFORGE_STATE_URL": state_url,
        "VIDFORGE_STATE_TIMEOUT_S": "2",
        "VIDFORGE_STATE_RETRY_MAX_S": "1",
        "VIDFORGE_MIN_SEGMENT_S": "2",
        "VIDFORGE_POLL_INTERVAL_MS": "500",
        "SSL_CERT_FILE": str(ca.ca_file),
        "VIDFORGE_WEBHOOK_ALLOW_HOSTS": "127.0.0.1",
        "VIDFORGE_WEBHOOK_SECRETS_FILE": str(secrets),
    }
    return ServerProcess(tmp_path / "data", env=env, tokens={TOKEN: PRINCIPAL})


def enveloped_or_answered(body: dict) -> dict | None:
    """A tasks/get answer during the outage: the task (read from the registry's memory), or the temporary error with
    the envelope in `data` — never a bare -32603. Returns the task, or None for the error."""
    if "result" in body:
        return body["result"]
    data = body["error"]["data"]
    assert data["machine_code"] == "internal_error" and data["temporary"] is True, body
    assert data["retry_after_ms"] >= 1000, body
    return None


def readiness(server: ServerProcess) -> tuple[int, dict]:
    answer = httpx.get(f"{server.base}/readyz", timeout=30)
    return answer.status_code, answer.json()


class Fault:
    """How the database goes away and comes back: `stop` (pg_ctl -m immediate, then started again on the same data),
    `kill` (SIGKILL, then crash recovery), `stall` (a proxy in between holds every byte, then lets them through) and
    `failover` (the primary killed and its streaming standby promoted: the server has a multi-host URL)."""

    def __init__(self, kind: str, database: postgres.PostgresServer) -> None:
        self.kind, self.database = kind, database
        self.proxy = StallProxy(database.port) if kind == "stall" else None
        self.standby = postgres.PostgresServer.standby_of(database) if kind == "failover" else None

    def url(self, state_url: str) -> str:
        if self.proxy is not None:
            return state_url.replace(f":{self.database.port}/", f":{self.proxy.port}/")
        if self.standby is not None:
            return postgres.multi_host_url(self.database, self.standby, state_url.rsplit("/", 1)[1])
        return state_url

    def begin(self) -> None:
        if self.proxy is not None:
            self.proxy.stall()
        elif self.kind == "stop":
            self.database.stop_server()
        else:
            if self.standby is not None:
                self.standby.wait_caught_up(self.database)
            self.database.kill()

    def end(self) -> None:
        if self.proxy is not None:
            self.proxy.resume()
        elif self.standby is not None:
            self.standby.promote()
        else:
            self.database.start_server()

    def close(self) -> None:
        if self.proxy is not None:
            self.proxy.close()
        if self.standby is not None:
            self.standby.stop()


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> tuple[str, int]:
    """The clip every kind of outage renders (made once: each test uploads it to its own server), and its frames."""
    folder = tmp_path_factory.mktemp("outage-media")
    clip = make_clip(str(folder / "clip.mp4"), seconds=6.0, width=640, height=360, audio=False)
    return clip, decode_all(clip, keep="none").frame_count


def ride_through(server: ServerProcess, wire: Wire, fault: Fault, source: tuple[str, int], hook: str) -> list[str]:
    """RENDERS renders with a webhook, the outage while they encode, the checks while it lasts, then the database's
    return and the checks after it: every render completes with every frame. Returns the renders' task ids."""
    clip, expected_frames = source
    asset = upload(server, clip, TOKEN)
    arguments = {"source_asset_uri": asset, "output_format": "mp4", "resolution": "720p"}
    renders = [wire.tool(RENDER, {**arguments, "notify_url": hook})["taskId"] for _ in range(RENDERS)]
    poll_task(wire, renders[0], lambda t: "frame" in t.get("statusMessage", ""), timeout=120)

    fault.begin()
    status, body = wait_until(
        lambda: (ready := readiness(server))[0] == 503 and ready, BACK_S, 0.3, "/readyz to see the outage"
    )
    assert body["state"] == "unavailable" and "state" in body["failing"], body
    assert fault.database.password not in json.dumps(body)
    for task_id in renders:
        enveloped_or_answered(wire.task("tasks/get", task_id))
    refused = wire.tool(RENDER, arguments)
    assert refused["isError"] is True and refused["structuredContent"]["temporary"] is True, refused
    listing = httpx.get(f"{server.base}/renders", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    assert listing.status_code == 503 and int(listing.headers["Retry-After"]) >= 1, listing.text
    assert listing.json()["error"]["temporary"] is True

    fault.end()
    wait_until(lambda: readiness(server)[0] == 200, BACK_S, 0.3, "/readyz ready after the database's return")
    for task_id in renders:
        ended = poll_task(wire, task_id, lambda t: t["status"] in TERMINAL)
        assert ended["status"] == "completed" and ended["result"]["isError"] is False, ended
        video = httpx.get(
            f"{server.base}/artifacts/{task_id}/final.mp4",
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=120,
            follow_redirects=True,
        )
        assert video.status_code == 200
        path = server.data_dir.parent / f"{task_id}.mp4"
        path.write_bytes(video.content)
        assert decode_all(str(path), keep="none").frame_count == expected_frames, task_id
    return renders


# Outages that reach the database at the same address (stopped, killed) ride through one server in turn: a server
# start saved, and the second proves the first left nothing behind that a later outage trips on.
@pytest.mark.parametrize("kinds", [("stop", "kill"), ("stall",), ("failover",)], ids="+".join)
def test_renders_ride_through_a_database_outage_and_each_webhook_is_sent_once(database, source, tmp_path, kinds):
    if not database.running:
        database.start_server()
    ca = CertificateAuthority(tmp_path / "ca")
    receiver = Receiver(ca)
    faults = [Fault(kind, database) for kind in kinds]
    state_url = faults[0].url(database.new_database())
    try:
        with outage_server(tmp_path, ca, state_url) as server:
            wire = Wire(server.url, token=TOKEN, tasks=True)
            renders = [
                task for fault in faults for task in ride_through(server, wire, fault, source, receiver.url("/hook"))
            ]

            def completions() -> list[str]:
                received = [json.loads(got.body) for got in list(receiver.received)]
                return [body["task_id"] for body in received if body["type"] == "render.completed"]

            wait_until(lambda: len(completions()) >= len(renders), BACK_S * 2, 0.3, "every render.completed delivered")
            assert sorted(completions()) == sorted(renders)  # each once
            ids = [got.headers["Vidforge-Event-Id"] for got in receiver.received]
            assert len(ids) == len(set(ids))
            wire.close()
    finally:
        receiver.stop()
        for fault in faults:
            fault.close()
