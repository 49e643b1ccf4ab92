"""Issue 37 end to end: a real `vidforge serve` delivers its renders' webhooks to a real HTTPS receiver on loopback
(a self-signed CA the server trusts through SSL_CERT_FILE; 127.0.0.1 allowed by VIDFORGE_WEBHOOK_ALLOW_HOSTS), from
the registry's outbox, through the dispatcher actor. Short clips: the renders take seconds."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from examples.webhook_receiver import verify
from tests.harness import ServerProcess, Wire, upload, wait_until
from tests.https_origin import CertificateAuthority
from tests.media import make_clip, make_watermark_png
from tests.test_webhooks import Receiver

pytestmark = pytest.mark.ray

RENDER = "vidforge_render_video"
TOKEN, PRINCIPAL, SECRET = "tok-hooks", "hooks", "whsec_live"
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


def hooked_server(tmp_path: Path, ca: CertificateAuthority) -> ServerProcess:
    secrets = tmp_path / "webhook-secrets.json"
    secrets.write_text(json.dumps({PRINCIPAL: [SECRET]}))
    env = {
        "SSL_CERT_FILE": str(ca.ca_file),
        "VIDFORGE_WEBHOOK_ALLOW_HOSTS": "127.0.0.1",
        "VIDFORGE_WEBHOOK_SECRETS_FILE": str(secrets),
    }
    return ServerProcess(tmp_path / "data", env=env, tokens={TOKEN: PRINCIPAL})


def render(wire: Wire, source: str, url: str, **extra: object) -> str:
    arguments = {"source_asset_uri": source, "output_format": "mp4", "resolution": "720p", "metadata": METADATA}
    result = wire.tool(RENDER, {**arguments, "notify_url": url, **extra})
    assert not result.get("isError"), result
    return str(result["structuredContent"]["render_id"])


def deliveries(server: ServerProcess) -> list[dict]:
    """`GET /webhooks`: the caller's deliveries, as the server records them."""
    answer = httpx.get(f"{server.base}/webhooks", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    assert answer.status_code == 200, answer.text
    return list(answer.json()["items"])


def dispatchers(server: ServerProcess) -> list[int]:
    return [pid for pid, title in server.processes() if title.startswith("ray::WebhookDispatcher")]


def bodies(receiver: Receiver, render_id: str) -> list[dict]:
    return [body for r in list(receiver.received) if (body := json.loads(r.body))["task_id"] == render_id]


def test_each_event_of_a_render_is_delivered_once_signed_with_the_callers_metadata(tmp_path, ca, clips):
    receiver = Receiver(ca)
    try:
        with hooked_server(tmp_path, ca) as server:
            wire = Wire(server.url, token=TOKEN)
            source, long = upload(server, clips["short"], TOKEN), upload(server, clips["long"], TOKEN)
            logo = upload(server, make_watermark_png(str(tmp_path / "logo.png")), TOKEN)
            hook = receiver.url("/hook")
            plain = wire.tool(RENDER, {"source_asset_uri": source, "output_format": "mp4", "resolution": "720p"})
            assert plain["structuredContent"]["render_id"]
            assert dispatchers(server) == []  # nothing to deliver yet: no process for it

            watermarked = render(wire, source, hook, watermark={"image_asset_uri": logo})
            (asked,) = wait_until(lambda: bodies(receiver, watermarked), DELIVERY_S, message="render.input_required")
            assert asked["type"] == "render.input_required" and asked["metadata"] == METADATA
            review = httpx.get(asked["review_url"], timeout=30)  # the link works: the review page, no token needed
            assert review.status_code == 200 and watermarked in review.text
            wire.tool("vidforge_approve_watermark", {"render_id": watermarked, "approved": True})

            cancelled = render(wire, long, hook)
            wire.tool("vidforge_cancel_render", {"render_id": cancelled})

            def settled() -> bool:
                listed = deliveries(server)
                return len(listed) == 3 and all(item["state"] == "delivered" for item in listed)

            wait_until(settled, DELIVERY_S, message="three events delivered")
            assert [b["type"] for b in bodies(receiver, watermarked)] == ["render.input_required", "render.completed"]
            assert [b["type"] for b in bodies(receiver, cancelled)] == ["render.cancelled"]
            completed = bodies(receiver, watermarked)[1]
            assert completed["state"] == "succeeded" and completed["render"]["render_id"] == watermarked
            ids = [r.headers["Vidforge-Event-Id"] for r in receiver.received]
            assert len(ids) == len(set(ids)) == 3  # each once
            for got in receiver.received:
                assert verify([SECRET], got.headers["Vidforge-Signature"], got.body)
                assert json.loads(got.body)["metadata"] == METADATA and TOKEN not in got.body.decode()
            wire.close()
    finally:
        receiver.stop()


def test_events_pending_when_the_server_is_killed_are_delivered_once_after_its_restart(tmp_path, ca, clips):
    down = Receiver(ca)
    port = down.port
    down.stop()  # the receiver is down: every attempt fails to connect
    hook = f"https://127.0.0.1:{port}/hook"
    server = hooked_server(tmp_path, ca).start()
    back: Receiver | None = None
    try:
        wire = Wire(server.url, token=TOKEN)
        source, long = upload(server, clips["short"], TOKEN), upload(server, clips["long"], TOKEN)
        render(wire, source, hook)
        cancelled = render(wire, long, hook)
        wire.tool("vidforge_cancel_render", {"render_id": cancelled})
        wire.close()

        def tried() -> bool:
            listed = deliveries(server)
            return len(listed) == 2 and all(item["attempts"] >= 1 and item["state"] == "pending" for item in listed)

        wait_until(tried, DELIVERY_S, message="both events tried against the receiver that is down")
        pending = sorted(item["event_id"] for item in deliveries(server))
        server.kill()  # SIGKILL: the server, its Ray, the dispatcher
        server.start()
        back = Receiver(ca, port=port)
        wait_until(
            lambda: all(item["state"] == "delivered" for item in deliveries(server)),
            DELIVERY_S,
            message="every event delivered after the restart",
        )
        assert sorted(r.headers["Vidforge-Event-Id"] for r in back.received) == pending  # each acknowledged once
        assert all(verify([SECRET], r.headers["Vidforge-Signature"], r.body) for r in back.received)
    finally:
        server.kill()
        if back is not None:
            back.stop()


def test_a_render_with_a_destination_running_when_the_server_is_killed_is_delivered_after_its_restart(
    tmp_path, ca, clips
):
    """Nothing pending in the outbox at the restart, but a render that will notify is still running: the restarted
    server starts the dispatcher (it starts none while nothing may be delivered), and the render's end arrives."""
    receiver = Receiver(ca)
    server = hooked_server(tmp_path, ca).start()
    try:
        wire = Wire(server.url, token=TOKEN)
        long = upload(server, clips["long"], TOKEN)
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
        assert deliveries(server) == []
        killed_at = int(time.time())  # whole seconds, as the event's created_at
        server.kill()  # SIGKILL: the server, its Ray, the render and the dispatcher
        server.start()
        (ended,) = wait_until(lambda: bodies(receiver, render_id), 4 * DELIVERY_S, message="render.completed")
        assert ended["type"] == "render.completed" and ended["state"] == "succeeded"
        # It ended after the kill: the render was still running then, and the restarted server rendered it again.
        assert datetime.fromisoformat(ended["created_at"]).timestamp() >= killed_at, (ended["created_at"], killed_at)
    finally:
        server.kill()
        receiver.stop()
