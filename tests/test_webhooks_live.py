"""Issue 37 end to end: a real `vidforge serve` delivers its renders' webhooks to a real HTTPS receiver on loopback
(a self-signed CA the server trusts through SSL_CERT_FILE; 127.0.0.1 allowed by VIDFORGE_WEBHOOK_ALLOW_HOSTS), from
the registry's outbox, through the dispatcher actor. Short clips: the renders take seconds. One server for the module,
killed and started again by the tests that need it; each test is a principal of its own, so each sees only its own
deliveries (`GET /webhooks` lists the caller's)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime

import httpx
import pytest

from examples.webhook_receiver import verify
from tests.harness import ServerProcess, Wire, upload, wait_until
from tests.https_origin import CertificateAuthority
from tests.media import make_clip, make_watermark_png
from tests.test_webhooks import Receiver

pytestmark = pytest.mark.ray

RENDER = "vidforge_render_video"
SECRET = "whsec_live"
# One principal per test: `deliveries` lists the caller's only.
SIGNED, RESTARTED, RUNNING = "tok-hooks", "tok-hooks-restart", "tok-hooks-running"
TOKENS = {SIGNED: "hooks", RESTARTED: "hooks-restart", RUNNING: "hooks-running"}
METADATA = {"order": "o-42", "user": "u-7"}
DELIVERY_S = 120  # a render of a short clip, then a delivery (a retry after a restart: seconds of backoff)
# The clip a cancel or a kill must find still rendering: 1 200 frames to encode at 720p (~12 s on the 2-core machine,
# as long again after a restart, which renders it from the start), where the kill comes 2.5-5 s after the render starts
# (the dispatcher's start, asked for by the render's create). Its length is not what the tests check: the longer it is,
# the longer the restarted server takes to render it.
LONG_CLIP_S = 40.0


@pytest.fixture(scope="module")
def ca(tmp_path_factory) -> CertificateAuthority:
    return CertificateAuthority(tmp_path_factory.mktemp("webhook-live-ca"))


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> dict[str, str]:
    """The clips the tests upload, made once: a short one that renders in seconds, and a long one (LONG_CLIP_S, ~2
    CPU-s to make) that a cancel, sent right after the render's create, or a kill reaches long before its end."""
    root = tmp_path_factory.mktemp("webhook-live-media")
    return {
        "short": make_clip(str(root / "short.mp4"), seconds=1.0, width=160, height=90),
        "long": make_clip(str(root / "long.mp4"), seconds=LONG_CLIP_S, width=160, height=90),
    }


@pytest.fixture(scope="module")
def server(tmp_path_factory, ca: CertificateAuthority) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("webhook-live")
    secrets = root / "webhook-secrets.json"
    secrets.write_text(json.dumps({principal: [SECRET] for principal in TOKENS.values()}))
    env = {
        "SSL_CERT_FILE": str(ca.ca_file),
        "VIDFORGE_WEBHOOK_ALLOW_HOSTS": "127.0.0.1",
        "VIDFORGE_WEBHOOK_SECRETS_FILE": str(secrets),
    }
    with ServerProcess(root / "data", env=env, tokens=TOKENS) as process:
        yield process


def render(wire: Wire, source: str, url: str, **extra: object) -> str:
    arguments = {"source_asset_uri": source, "output_format": "mp4", "resolution": "720p", "metadata": METADATA}
    result = wire.tool(RENDER, {**arguments, "notify_url": url, **extra})
    assert not result.get("isError"), result
    return str(result["structuredContent"]["render_id"])


def deliveries(server: ServerProcess, token: str) -> list[dict]:
    """`GET /webhooks`: the caller's deliveries, as the server records them."""
    answer = httpx.get(f"{server.base}/webhooks", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert answer.status_code == 200, answer.text
    return list(answer.json()["items"])


def dispatchers(server: ServerProcess) -> list[int]:
    return [pid for pid, title in server.processes() if title.startswith("ray::WebhookDispatcher")]


def bodies(receiver: Receiver, render_id: str) -> list[dict]:
    return [body for r in list(receiver.received) if (body := json.loads(r.body))["task_id"] == render_id]


def test_each_event_of_a_render_is_delivered_once_signed_with_the_callers_metadata(server, tmp_path, ca, clips):
    receiver = Receiver(ca)
    try:
        wire = Wire(server.url, token=SIGNED)
        source, long = upload(server, clips["short"], SIGNED), upload(server, clips["long"], SIGNED)
        logo = upload(server, make_watermark_png(str(tmp_path / "logo.png")), SIGNED)
        hook = receiver.url("/hook")
        plain = wire.tool(RENDER, {"source_asset_uri": source, "output_format": "mp4", "resolution": "720p"})
        assert plain["structuredContent"]["render_id"]
        assert dispatchers(server) == []  # nothing to deliver yet (the module's first test): no process for it

        watermarked = render(wire, source, hook, watermark={"image_asset_uri": logo})
        (asked,) = wait_until(lambda: bodies(receiver, watermarked), DELIVERY_S, message="render.input_required")
        assert asked["type"] == "render.input_required" and asked["metadata"] == METADATA
        review = httpx.get(asked["review_url"], timeout=30)  # the link works: the review page, no token needed
        assert review.status_code == 200 and watermarked in review.text
        wire.tool("vidforge_approve_watermark", {"render_id": watermarked, "approved": True})

        cancelled = render(wire, long, hook)
        wire.tool("vidforge_cancel_render", {"render_id": cancelled})

        def settled() -> bool:
            listed = deliveries(server, SIGNED)
            return len(listed) == 3 and all(item["state"] == "delivered" for item in listed)

        wait_until(settled, DELIVERY_S, message="three events delivered")
        assert [b["type"] for b in bodies(receiver, watermarked)] == ["render.input_required", "render.completed"]
        assert [b["type"] for b in bodies(receiver, cancelled)] == ["render.cancelled"]
        completed = bodies(receiver, watermarked)[1]
        assert completed["state"] == "succeeded" and completed["render"]["render_id"] == watermarked
        assert completed["usage"]["cpu_seconds"] > 0 and completed["usage"]["render_seconds"] > 0, completed
        ids = [r.headers["Vidforge-Event-Id"] for r in receiver.received]
        assert len(ids) == len(set(ids)) == 3  # each once
        for got in receiver.received:
            assert verify([SECRET], got.headers["Vidforge-Signature"], got.body)
            assert json.loads(got.body)["metadata"] == METADATA and SIGNED not in got.body.decode()
        wire.close()
    finally:
        receiver.stop()


def test_events_pending_when_the_server_is_killed_are_delivered_once_after_its_restart(server, ca, clips):
    down = Receiver(ca)
    port = down.port
    down.stop()  # the receiver is down: every attempt fails to connect
    hook = f"https://127.0.0.1:{port}/hook"
    back: Receiver | None = None
    try:
        wire = Wire(server.url, token=RESTARTED)
        source, long = upload(server, clips["short"], RESTARTED), upload(server, clips["long"], RESTARTED)
        render(wire, source, hook)
        cancelled = render(wire, long, hook)
        wire.tool("vidforge_cancel_render", {"render_id": cancelled})
        wire.close()

        def tried() -> bool:
            listed = deliveries(server, RESTARTED)
            return len(listed) == 2 and all(item["attempts"] >= 1 and item["state"] == "pending" for item in listed)

        wait_until(tried, DELIVERY_S, message="both events tried against the receiver that is down")
        pending = sorted(item["event_id"] for item in deliveries(server, RESTARTED))
        server.kill()  # SIGKILL: the server, its Ray, the dispatcher
        # Back before the server: its first tries after the restart find the receiver up (a try that finds it down
        # waits the growing backoff out), and still nothing but the restarted server delivers.
        back = Receiver(ca, port=port)
        server.start()
        wait_until(
            lambda: all(item["state"] == "delivered" for item in deliveries(server, RESTARTED)),
            DELIVERY_S,
            message="every event delivered after the restart",
        )
        assert sorted(r.headers["Vidforge-Event-Id"] for r in back.received) == pending  # each acknowledged once
        assert all(verify([SECRET], r.headers["Vidforge-Signature"], r.body) for r in back.received)
    finally:
        if back is not None:
            back.stop()


def test_a_render_with_a_destination_running_when_the_server_is_killed_is_delivered_after_its_restart(
    server, ca, clips
):
    """Nothing pending in the outbox at the restart, but a render that will notify is still running: the restarted
    server starts the dispatcher (it starts none while nothing may be delivered), and the render's end arrives."""
    receiver = Receiver(ca)
    try:
        wire = Wire(server.url, token=RUNNING)
        long = upload(server, clips["long"], RUNNING)
        render_id = render(wire, long, receiver.url("/hook"))
        wait_until(
            lambda: (
                wire.tool("vidforge_get_render_status", {"render_id": render_id})["structuredContent"]["state"]
                == "rendering"
            ),
            DELIVERY_S,
            message="the render under way",
        )
        wire.close()
        wait_until(lambda: dispatchers(server), DELIVERY_S, message="the dispatcher started by the render")
        # Nothing in the outbox of any principal of the module's: only the running render asks for the dispatcher.
        assert deliveries(server, RUNNING) == []
        for token in (SIGNED, RESTARTED):
            assert all(item["state"] == "delivered" for item in deliveries(server, token))
        killed_at = int(time.time())  # whole seconds, as the event's created_at
        server.kill()  # SIGKILL: the server, its Ray, the render and the dispatcher
        server.start()
        (ended,) = wait_until(lambda: bodies(receiver, render_id), 4 * DELIVERY_S, message="render.completed")
        assert ended["type"] == "render.completed" and ended["state"] == "succeeded"
        # It ended after the kill: the render was still running then, and the restarted server rendered it again.
        assert datetime.fromisoformat(ended["created_at"]).timestamp() >= killed_at, (ended["created_at"], killed_at)
    finally:
        receiver.stop()
