"""Issue 37 on the wire the fast lane serves (tests/fast_wire.py: the production `/mcp` stack and render service, an
in-process TaskRegistry): the caller's `metadata` and `notify_url` on `vidforge_render_video` — their limits refused
by name, the metadata handed back under `_meta` and by the status tool with every `structuredContent` as before,
the notify_url guarded at submit — and the events a render's real record changes make, delivered signed to a real
HTTPS receiver."""

from __future__ import annotations

import json
from datetime import datetime

import anyio
import pytest

from examples.webhook_receiver import verify
from mcp_protocol._caller_metadata import META_KEY
from mcp_protocol.domain import ApprovalTimedOut, Failed, RenderRequest, TaskRecord
from mcp_protocol.error_codes import ErrorCode
from mcp_protocol.webhook_events import EventType, events_for
from serve_app.webhooks._destinations import DestinationGuard
from serve_app.webhooks._dispatcher import Backoff, Dispatcher, DispatchSettings
from serve_app.webhooks.secrets import WebhookSecrets
from tests.fast_wire import Media, fast_wire
from tests.harness import COMPLETED_FIELDS, wait_until
from tests.https_origin import CertificateAuthority
from tests.test_webhooks import Receiver, StoreOutbox

RENDER, STATUS = "vidforge_render_video", "vidforge_get_render_status"
METADATA = {"order_id": "o-1842", "user.id": "u_77", "note": "ünïcödé ✓"}


def render_args(media: Media, watermark: bool = False, **extra) -> dict:
    args = {"source_asset_uri": media.video, "output_format": "mp4", "resolution": "720p", **extra}
    if watermark:
        args["watermark"] = {"image_asset_uri": media.image}
    return args


@pytest.fixture(scope="module")
def ca(tmp_path_factory) -> CertificateAuthority:
    return CertificateAuthority(tmp_path_factory.mktemp("webhook-ca"))


@pytest.fixture
def receiver(ca):
    receiver = Receiver(ca)
    yield receiver
    receiver.stop()


def refusal(result: dict) -> dict:
    assert result["isError"] is True, result
    return result["structuredContent"]


def iso_s(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_metadata_comes_back_under_meta_and_from_the_status_tool(tmp_path):
    with fast_wire(tmp_path) as wire:
        plain = wire.tool(RENDER, render_args(wire.media), tasks=True)["taskId"]
        created = wire.tool(RENDER, render_args(wire.media, metadata=METADATA), tasks=True)
        task_id = created["taskId"]
        assert created["_meta"][META_KEY] == METADATA
        assert wire.task("tasks/get", task_id)["result"]["_meta"][META_KEY] == METADATA
        assert wire.tool(STATUS, {"render_id": task_id})["structuredContent"]["metadata"] == METADATA
        wire.succeed(task_id)
        wire.succeed(plain)
        done = wire.task("tasks/get", task_id)["result"]
        assert done["_meta"][META_KEY] == METADATA and done["result"]["_meta"][META_KEY] == METADATA
        # The render result's structuredContent is the contract's, with metadata or without it.
        before = wire.task("tasks/get", plain)["result"]
        assert list(done["result"]["structuredContent"]) == [*COMPLETED_FIELDS]
        # The same fields and values but the render's own id and when its result expires (from its completion: the
        # two completions may fall in different seconds on a loaded machine).
        ours, theirs = done["result"]["structuredContent"], before["result"]["structuredContent"]
        assert abs(iso_s(ours["expires_at"]) - iso_s(theirs["expires_at"])) < 60
        assert json.dumps({**ours, "expires_at": None}).replace(task_id, plain) == json.dumps(
            {**theirs, "expires_at": None}
        )
        # Without metadata, nothing new anywhere.
        assert META_KEY not in before["_meta"] and "_meta" not in before["result"]
        assert "metadata" not in wire.tool(STATUS, {"render_id": plain})["structuredContent"]
        # A client without the tasks extension gets it on the accepted result, the structuredContent as before.
        accepted = wire.tool(RENDER, render_args(wire.media, metadata=METADATA))
        assert accepted["_meta"][META_KEY] == METADATA and "metadata" not in accepted["structuredContent"]


@pytest.mark.parametrize(
    ("metadata", "field", "words"),
    [
        ({f"k{n}": "v" for n in range(17)}, "metadata", "has 17 keys; the limit is 16 (maxProperties)"),
        ({"has space": "v"}, "metadata", "keys must match ^[A-Za-z0-9_.-]{1,64}$"),
        ({"k" * 65: "v"}, "metadata", "keys must match"),
        ({"order\n": "v"}, "metadata", "keys must match"),  # `$` ends the key: a final newline is not before it
        ({"k": "v" * 513}, "metadata.k", "has 513 characters; the limit is 512 (maxLength)"),
        ({"k": "é" * 300}, "metadata.k", "has 600 bytes in UTF-8; the limit is 512 bytes per metadata value"),
        ({"k": 7}, "metadata.k", "is not of type 'string'"),
    ],
)
def test_metadata_limits_are_refused_by_name(tmp_path, metadata, field, words):
    with fast_wire(tmp_path) as wire:
        args = render_args(wire.media, metadata=metadata)
        error = refusal(wire.tool(RENDER, args, tasks=True))
        assert (error["code"], error["details"]["field"]) == (ErrorCode.INVALID_ARGUMENT, field)
        assert words in error["details"]["reason"], error["details"]["reason"]
        # The repair is the rest of the call, callable as it is (the offending entry, or the whole object, dropped).
        assert error["repair"]["arguments"].get("metadata", {}) == {}


def test_a_refused_notify_url_is_refused_at_submit_and_nothing_is_sent(tmp_path, receiver):
    with fast_wire(tmp_path) as wire:
        for url, words in [
            (receiver.url("/hook"), "127.0.0.1 is a loopback address"),
            (f"http://127.0.0.1:{receiver.port}/hook", "must be https://"),
            ("https://10.1.2.3/hook", "private address"),
        ]:
            error = refusal(wire.tool(RENDER, render_args(wire.media, notify_url=url), tasks=True))
            assert (error["code"], error["details"]["field"]) == (ErrorCode.INVALID_ARGUMENT, "notify_url")
            assert words in error["details"]["reason"], error["details"]["reason"]
            assert "notify_url" not in error["repair"]["arguments"]
        assert "VIDFORGE_WEBHOOK_ALLOW_HOSTS" in error["details"]["reason"]
    assert receiver.received == []


def test_notify_url_and_the_principal_default_are_kept_and_not_compared_by_idempotency(tmp_path, receiver):
    hooks = tmp_path / "hooks.json"
    hooks.write_text(json.dumps({"alice": {"secrets": ["whsec_a"], "default_url": "https://hooks.example/alice"}}))
    with fast_wire(tmp_path, webhook_allow_hosts="127.0.0.1", webhook_secrets_file=str(hooks)) as wire:
        url = receiver.url("/hook")
        first = wire.tool(RENDER, render_args(wire.media, notify_url=url, idempotency_key="k1"), tasks=True)
        rec = wire.run(wire.registry.get_any(first["taskId"]))
        assert rec.request.notify_url == url
        # The same call with another destination replays the render (the first destination stays) ...
        again = wire.tool(RENDER, render_args(wire.media, idempotency_key="k1"), tasks=True)
        assert again["taskId"] == first["taskId"]
        # ... other metadata under the same key is other work.
        other = wire.tool(RENDER, render_args(wire.media, idempotency_key="k1", metadata={"a": "b"}), tasks=True)
        assert refusal(other)["code"] == ErrorCode.IDEMPOTENCY_CONFLICT
        defaulted = wire.tool(RENDER, render_args(wire.media), tasks=True)
        assert wire.run(wire.registry.get_any(defaulted["taskId"])).request.notify_url == "https://hooks.example/alice"
    assert receiver.received == []  # nothing is sent at submit


def test_a_record_stored_before_metadata_loads_and_compares_as_before():
    old = {"source_asset_uri": "vidforge://assets/a_" + "1" * 24, "output_format": "mp4", "resolution": "720p"}
    request = RenderRequest.model_validate({**old, "idempotency_key": "k"})
    assert request.metadata is None and request.notify_url is None
    assert request.request_form() == json.dumps(old, sort_keys=True, separators=(",", ":"))
    assert RenderRequest.model_validate({**old, "metadata": {}}).request_form() == request.request_form()


def dispatch_done(outbox: StoreOutbox) -> bool:
    with outbox.lock:
        return outbox.store.webhook_backlog().pending == 0


@pytest.mark.anyio
async def test_each_event_of_a_render_is_delivered_once_signed_with_its_metadata(tmp_path, ca, receiver):
    """The registry's real record changes, through `events_for` (as TaskRegistry._commit will call it), into the
    outbox, and out to the receiver."""
    hooks = tmp_path / "hooks.json"
    hooks.write_text(json.dumps({"alice": ["whsec_alice"]}))
    outbox = StoreOutbox(tmp_path / "outbox-state")
    url = receiver.url("/hook")
    retention_s = 604_800
    with fast_wire(tmp_path, webhook_allow_hosts="127.0.0.1", webhook_secrets_file=str(hooks)) as wire:
        seen: dict[str, TaskRecord | None] = {}

        def changed(rec: TaskRecord | None) -> None:
            assert rec is not None
            outbox.add(events_for(seen.get(rec.task_id), rec, retention_s=retention_s))
            seen[rec.task_id] = rec

        def create(watermark: bool = False) -> str:
            args = render_args(wire.media, watermark, metadata=METADATA, notify_url=url)
            task_id = wire.tool(RENDER, args, tasks=True)["taskId"]
            changed(wire.run(wire.registry.get_any(task_id)))
            return task_id

        approved = create(watermark=True)
        changed(wire.ask_approval(approved))
        changed(wire.run(wire.registry.get_any(approved)))  # saved again, the same round: no second event
        wire.tool("vidforge_approve_watermark", {"render_id": approved, "approved": True})
        changed(wire.run(wire.registry.get_any(approved)))
        changed(wire.progress(approved, 5, 20))
        changed(wire.succeed(approved))
        cancelled = create()
        wire.tool("vidforge_cancel_render", {"render_id": cancelled})
        changed(wire.apply_cancel(cancelled))
        failed = create()
        changed(wire.end(failed, Failed(code=ErrorCode.RENDER_FAILED, reason="the encoder stopped")))
        expired = create()
        changed(wire.end(expired, ApprovalTimedOut(timeout_s=1800.0)))
        plain = wire.tool(RENDER, render_args(wire.media), tasks=True)["taskId"]  # no notify_url: no events
        assert events_for(None, wire.succeed(plain), retention_s=retention_s) == []

    # Room for all five events at once and a short poll: with two slots, the three events a pass could not start
    # waited out their lease (attempt timeout + 2 polls + LEASE_MARGIN_S, 12 s) twice, 24 s of the fast lane. The
    # per-destination bound and the leases are tests/test_webhooks.py's.
    settings = DispatchSettings(
        max_age_s=3600, attempt_timeout_s=5, max_per_destination=8, backoff=Backoff(0.1, 1), poll_s=0.05
    )
    dispatch = Dispatcher(
        outbox,
        WebhookSecrets(str(hooks), None),
        DestinationGuard("127.0.0.1"),
        settings,
        review_link=lambda event: (
            f"https://vidforge.example/review/{event.task_id}?cap=round{event.review.input_seq}"
            if event.review
            else None
        ),
        roots=ca.client_context(),
    )
    async with anyio.create_task_group() as group:
        group.start_soon(dispatch.run)
        await anyio.to_thread.run_sync(
            lambda: wait_until(lambda: dispatch_done(outbox), 60, 0.05, "every event acknowledged")
        )
        group.cancel_scope.cancel()
    bodies = [json.loads(got.body) for got in receiver.received]
    assert all(verify(["whsec_alice"], got.headers["Vidforge-Signature"], got.body) for got in receiver.received)
    by_type = {(body["task_id"], body["type"]) for body in bodies}
    assert (
        sorted(by_type)
        == sorted(
            [
                (approved, EventType.INPUT_REQUIRED),
                (approved, EventType.COMPLETED),
                (cancelled, EventType.CANCELLED),
                (failed, EventType.FAILED),
                (expired, EventType.EXPIRED),
            ]
        )
        and len(bodies) == 5
    )
    assert len({body["id"] for body in bodies}) == 5 and all(body["metadata"] == METADATA for body in bodies)
    for body in bodies:
        assert body["created_at"].endswith("Z") and body["render"]["render_id"] == body["task_id"]
        assert "tok-alice" not in json.dumps(body) and "follow_up" not in body["render"]
        if body["type"] == EventType.INPUT_REQUIRED:
            assert body["state"] == "awaiting_watermark_approval"
            assert body["review_url"] == f"https://vidforge.example/review/{approved}?cap=round1"
        else:
            assert "review_url" not in body
    completed = next(body for body in bodies if body["type"] == EventType.COMPLETED)
    assert completed["state"] == "succeeded" and completed["render"]["size_bytes"] == 64
    assert {"video_uri", "duration_seconds", "resolution", "watermark_applied"} <= set(completed["render"])
    assert next(b for b in bodies if b["type"] == EventType.FAILED)["render"]["error"]["code"] == "render_failed"
