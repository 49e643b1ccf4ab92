"""Issue 37: webhook delivery against a real HTTPS receiver on loopback (a self-signed CA, tests/https_origin.py),
from the outbox of the registry's real SQLite store (actors/sqlite_store.py), which holds each event with the change
that caused it. Each test runs the production dispatcher on its own event loop; tests/test_webhooks_live.py runs it
in a real server."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
import pytest

from actors.sqlite_store import SqliteTaskStore
from examples.webhook_receiver import verify
from mcp_protocol.domain import Cancelled, RenderRequest, TaskRecord
from mcp_protocol.webhook_events import (
    Attempt,
    Backlog,
    Delivery,
    DeliveryState,
    EventType,
    OutboxEvent,
    canonical,
    event_id,
)
from serve_app.webhooks._destinations import DestinationGuard, DestinationRefused
from serve_app.webhooks._dispatcher import Backoff, Dispatcher, DispatchSettings, retry_after_s
from serve_app.webhooks._signing import signature_header
from serve_app.webhooks.secrets import WebhookSecrets, derived_secret
from tests.harness import wait_until
from tests.https_origin import CertificateAuthority, SilentTls


class StoreOutbox:
    """`serve_app.webhooks.outbox.Outbox` on the registry's real SQLite store (what `RegistryOutbox` reaches through
    the registry's calls). Calls are serialised: the test reads from another thread while the dispatcher runs."""

    def __init__(self, state_dir: Path) -> None:
        self.store = SqliteTaskStore(str(state_dir))
        self.lock = threading.Lock()
        self.adds = 0  # the registry's token of its outbox adds (`webhooks_added`)

    def add(self, events: list[OutboxEvent]) -> None:
        """What the registry's commit does: each event with its task's record, in one transaction."""
        with self.lock:
            for e in events:
                self.store.save_task(record_of(e), events=[e])
            self.adds += 1

    async def due(self, now_ms: int, limit: int, lease_until_ms: int) -> list[Delivery]:
        with self.lock:
            return self.store.webhooks_due(now_ms, limit, lease_until_ms)

    async def record_attempt(self, event_id: str, attempt: Attempt) -> None:
        with self.lock:
            self.store.record_webhook_attempt(event_id, attempt)

    async def list_deliveries(
        self, principal: str, limit: int, before: tuple[int, str] | None = None
    ) -> list[Delivery]:
        with self.lock:
            return self.store.list_webhook_deliveries(principal, limit, before)

    async def backlog(self) -> Backlog:
        with self.lock:
            return self.store.webhook_backlog()

    async def added_since(self, seen: str | None, timeout_s: float) -> str:
        """The registry's long poll, for adds made from the test's thread: looked at every ADDS_LOOK_S."""
        deadline = time.monotonic() + timeout_s
        while str(self.adds) == seen and time.monotonic() < deadline:
            await anyio.sleep(ADDS_LOOK_S)
        return str(self.adds)

    def delivery(self, event_id: str) -> Delivery:
        with self.lock:
            found = [d for p in PRINCIPALS for d in self.store.list_webhook_deliveries(p, 1000)]
        return next(d for d in found if d.event.event_id == event_id)


PRINCIPALS = ("alice", "bob")
ADDS_LOOK_S = 0.05


def record_of(e: OutboxEvent) -> TaskRecord:
    """A working render of the event's task (the record whose change the event tells of)."""
    request = RenderRequest(
        source_asset_uri="vidforge://assets/a_" + "1" * 24, output_format="mp4", resolution="720p", notify_url=e.url
    )
    return TaskRecord(
        task_id=e.task_id,
        principal=e.principal,
        request=request,
        status_message="",
        created_at_ms=e.created_at_ms,
        last_updated_at_ms=e.created_at_ms,
        ttl_ms=86_400_000,
        poll_interval_ms=10_000,
    )


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float  # time.time() when it arrived


@dataclass
class Receiver:
    """An HTTPS receiver on 127.0.0.1: each POST to a path takes the next scripted answer (status, headers), or
    200 once they are used up; "hang" holds the request unanswered until the receiver stops."""

    ca: CertificateAuthority
    script: dict[str, list[tuple[int, dict[str, str]] | str]] = field(default_factory=dict)
    port: int = 0  # 0: a free one
    received: list[Received] = field(default_factory=list)

    def __post_init__(self) -> None:
        import ssl

        self._released = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.received.append(Received(self.path, dict(self.headers.items()), body, time.time()))
                answers = receiver.script.get(self.path)
                answer = answers.pop(0) if answers else (200, {})
                if answer == "hang":
                    self._hold()
                    return
                assert not isinstance(answer, str)
                status, headers = answer
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _hold(self) -> None:
                receiver._released.wait()

        server_class = type("Server", (ThreadingHTTPServer,), {"allow_reuse_address": True})
        self.server = server_class(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(self.ca.cert_file), str(self.ca.key_file))
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.port}{path}"

    def at(self, path: str) -> list[Received]:
        return [r for r in self.received if r.path == path]

    def stop(self) -> None:
        self._released.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def ca(tmp_path_factory) -> CertificateAuthority:
    return CertificateAuthority(tmp_path_factory.mktemp("webhook-ca"))


@pytest.fixture
def receiver(ca) -> Iterator[Receiver]:
    receiver = Receiver(ca)
    yield receiver
    receiver.stop()


@pytest.fixture
def outbox(tmp_path) -> StoreOutbox:
    return StoreOutbox(tmp_path / "state")


def event(
    url: str, principal: str = "alice", task_id: str = "task_1", kind: EventType = EventType.COMPLETED
) -> OutboxEvent:
    now_ms = int(time.time() * 1000)
    eid = event_id(task_id, now_ms, kind)
    body = {"id": eid, "type": kind.value, "task_id": task_id, "state": "succeeded", "metadata": {"order": "o-1"}}
    return OutboxEvent(
        event_id=eid,
        type=kind,
        task_id=task_id,
        principal=principal,
        url=url,
        created_at_ms=now_ms,
        body=canonical(body).decode(),
    )


def settings(**overrides) -> DispatchSettings:
    values = {
        "max_age_s": 3600.0,
        "attempt_timeout_s": 5.0,
        "max_per_destination": 4,
        "backoff": Backoff(first_s=0.2, max_s=5.0),
        "poll_s": 0.05,
    }
    return DispatchSettings(**{**values, **overrides})


def dispatcher(outbox, ca, secrets: WebhookSecrets, allow: str = "127.0.0.1", **overrides) -> Dispatcher:
    return Dispatcher(outbox, secrets, DestinationGuard(allow), settings(**overrides), roots=ca.client_context())


def secrets_file(tmp_path: Path, entries: dict) -> Path:
    path = tmp_path / "webhook-secrets.json"
    path.write_text(json.dumps(entries))
    return path


async def run_until(dispatch: Dispatcher, done, timeout_s: float = 60, message: str = "the deliveries") -> None:
    """Run the dispatcher until `done()` holds (checked off the loop's thread, as wait_until does)."""
    async with anyio.create_task_group() as group:
        group.start_soon(dispatch.run)
        await anyio.to_thread.run_sync(lambda: wait_until(done, timeout_s, 0.05, message))
        group.cancel_scope.cancel()


def _signature(received: Received) -> str:
    return received.headers["Vidforge-Signature"]


@pytest.mark.anyio
async def test_a_delivery_is_signed_with_every_active_secret_and_the_file_is_reread(tmp_path, ca, receiver, outbox):
    path = secrets_file(tmp_path, {"alice": ["whsec_new", "whsec_old"]})
    secrets = WebhookSecrets(str(path), derive_key=None)
    first = event(receiver.url("/hook"), task_id="task_a")
    outbox.add([first, first])  # written twice (a retried commit): one row
    await run_until(dispatcher(outbox, ca, secrets), lambda: outbox.delivery(first.event_id).state == "delivered")
    (got,) = receiver.at("/hook")
    assert got.body == first.body.encode() and got.headers["Vidforge-Event-Id"] == first.event_id
    assert _signature(got).count("v1=") == 2
    # A receiver mid-rotation verifies with either key; not with another, nor a tampered body, nor an old stamp.
    assert verify(["whsec_old"], _signature(got), got.body) and verify(["whsec_new"], _signature(got), got.body)
    assert not verify(["whsec_other"], _signature(got), got.body)
    assert not verify(["whsec_new"], _signature(got), got.body + b" ")
    assert not verify(["whsec_new"], _signature(got), got.body, now=time.time() + 301)
    assert json.loads(got.body)["metadata"] == {"order": "o-1"}
    # The rotation ends: the file drops the old key, and the next delivery is signed with the new one alone.
    path.write_text(
        json.dumps({"alice": ["whsec_new"], "bob": {"secrets": ["whsec_bob"], "default_url": "https://b.example/h"}})
    )
    second = event(receiver.url("/hook"), task_id="task_b")
    outbox.add([second])
    await run_until(dispatcher(outbox, ca, secrets), lambda: outbox.delivery(second.event_id).state == "delivered")
    got = receiver.at("/hook")[-1]
    assert _signature(got).count("v1=") == 1 and not verify(["whsec_old"], _signature(got), got.body)
    assert verify(["whsec_new"], _signature(got), got.body)
    assert secrets.default_url("bob") == "https://b.example/h" and secrets.default_url("alice") is None


def test_a_principal_without_file_entry_signs_with_its_derived_secret(tmp_path):
    secrets = WebhookSecrets(None, derive_key="k" * 32)
    (only,) = secrets.secrets_of("carol")
    assert only == derived_secret("k" * 32, "carol") != derived_secret("k" * 32, "dave")
    assert only.startswith("whsec_") and WebhookSecrets(None, None).secrets_of("carol") == ()
    header = signature_header([only], 1_700_000_000, b"{}")
    assert verify([only], header, b"{}", now=1_700_000_000)


@pytest.mark.anyio
async def test_500_three_times_then_200_is_delivered_on_the_fourth_attempt_with_backoff(ca, receiver, outbox, caplog):
    caplog.set_level(logging.INFO, logger="serve_app.webhooks._dispatcher")
    receiver.script["/flaky"] = [(500, {}), (500, {}), (500, {}), (200, {})]
    one = event(receiver.url("/flaky"))
    outbox.add([one])
    await run_until(
        dispatcher(outbox, ca, WebhookSecrets(None, "k" * 32)),
        lambda: outbox.delivery(one.event_id).state == "delivered",
    )
    delivery = outbox.delivery(one.event_id)
    assert delivery.attempts == 4 and delivery.last_error is None
    got = receiver.at("/flaky")
    assert len(got) == 4 and {r.body for r in got} == {one.body.encode()}
    assert {r.headers["Vidforge-Event-Id"] for r in got} == {one.event_id}
    # Each wait at least the lower half of its doubling backoff (0.2 s, 0.4 s, 0.8 s): 0.1, 0.2, 0.4 s.
    gaps = [later.at - earlier.at for earlier, later in zip(got, got[1:])]
    assert all(gap >= 0.2 * 2**n / 2 for n, gap in enumerate(gaps)), gaps
    # Each failure is logged with the event and the reason; never the secret, the signature or the body.
    logged = [r.getMessage() for r in caplog.records if r.name == "serve_app.webhooks._dispatcher"]
    assert len(logged) == 3 and all(one.event_id in line and "answered 500" in line for line in logged)
    secret = derived_secret("k" * 32, "alice")
    assert not any(secret in line or "v1=" in line or "o-1" in line for line in logged)


@pytest.mark.anyio
async def test_retry_after_is_honoured(ca, receiver, outbox):
    receiver.script["/busy"] = [(429, {"Retry-After": "2"}), (200, {})]
    one = event(receiver.url("/busy"))
    outbox.add([one])
    dispatch = dispatcher(outbox, ca, WebhookSecrets(None, "k" * 32), backoff=Backoff(first_s=0.01, max_s=0.02))
    await run_until(dispatch, lambda: outbox.delivery(one.event_id).state == "delivered")
    first, second = receiver.at("/busy")
    assert second.at - first.at >= 2.0 and outbox.delivery(one.event_id).attempts == 2
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT", 0) > 0 and retry_after_s("soon", 0) is None


@pytest.mark.anyio
async def test_a_refused_address_gets_no_request(ca, receiver, outbox):
    guard = DestinationGuard("")  # the default: loopback refused
    for url, words in [
        (receiver.url("/hook"), "127.0.0.1 is a loopback address"),
        (f"http://127.0.0.1:{receiver.port}/hook", "must be https://"),
        (f"https://user:pw@127.0.0.1:{receiver.port}/hook", "user name or password"),
        ("https://169.254.169.254/latest", "cloud metadata"),
    ]:
        with pytest.raises(DestinationRefused) as refused:
            await guard.check(url)
        assert words in refused.value.reason, refused.value.reason
    assert "VIDFORGE_WEBHOOK_ALLOW_HOSTS" in refused.value.reason
    # An event whose destination the guard refuses at delivery (the allow-list changed) gives up, unsent.
    one = event(receiver.url("/hook"))
    outbox.add([one])
    dispatch = dispatcher(outbox, ca, WebhookSecrets(None, "k" * 32), allow="")
    await run_until(dispatch, lambda: outbox.delivery(one.event_id).state == "gave_up")
    assert "loopback" in str(outbox.delivery(one.event_id).last_error) and receiver.received == []


@pytest.mark.anyio
async def test_a_hanging_receiver_is_bounded_and_does_not_hold_up_other_destinations(ca, receiver, outbox):
    slow = Receiver(ca, script={"/hang": ["hang"] * 8})
    try:
        # Four events for the hanging destination, due first, and batches of two: the other destination's event is
        # still reached while the hanging one holds its only slot.
        stuck = [event(slow.url("/hang"), task_id=f"task_s{n}") for n in range(4)]
        other = event(receiver.url("/ok"), task_id="task_o")
        outbox.add([*stuck, other])
        dispatch = dispatcher(
            outbox, ca, WebhookSecrets(None, "k" * 32), attempt_timeout_s=3.0, max_per_destination=1, batch=2
        )

        def stuck_attempts() -> int:
            return sum(outbox.delivery(e.event_id).attempts for e in stuck)

        async with anyio.create_task_group() as group:
            group.start_soon(dispatch.run)
            await anyio.to_thread.run_sync(lambda: wait_until(lambda: receiver.at("/ok"), 30, 0.05, "the other"))
            # One attempt at a time to the hanging destination: each waits for the one before to time out.
            assert len(slow.at("/hang")) <= stuck_attempts() + 1
            await anyio.to_thread.run_sync(lambda: wait_until(lambda: stuck_attempts() >= 1, 30, 0.05, "the timeout"))
            group.cancel_scope.cancel()
        assert outbox.delivery(other.event_id).state == "delivered"
        timed_out = [outbox.delivery(e.event_id) for e in stuck if outbox.delivery(e.event_id).attempts]
        assert all(d.state == "pending" and d.last_error == "no answer within 3 s" for d in timed_out)
    finally:
        slow.stop()


@pytest.mark.anyio
async def test_an_attempt_timed_out_mid_handshake_closes_its_connection(ca, outbox):
    """A receiver that never finishes a TLS handshake: each attempt ends at the attempt timeout and closes its
    socket. One left open would stay in the dispatcher, whose deliveries every tenant shares, for as long as the
    receiver kept the connection."""
    host = SilentTls()
    try:
        stalled = event(f"https://127.0.0.1:{host.port}/hook")
        outbox.add([stalled])
        dispatch = dispatcher(outbox, ca, WebhookSecrets(None, "k" * 32), attempt_timeout_s=0.5)
        await run_until(dispatch, lambda: outbox.delivery(stalled.event_id).attempts >= 2, message="two attempts")
        assert outbox.delivery(stalled.event_id).last_error == "no answer within 0.5 s"
        wait_until(lambda: host.open_to_it() == 0, 30, message="every attempt's connection closed")
        assert len(host.accepted) >= 2
    finally:
        host.close()


@pytest.mark.anyio
async def test_events_survive_a_receiver_down_and_a_dispatcher_restart(tmp_path, ca, outbox):
    down = Receiver(ca)
    port = down.port
    down.stop()  # nobody listens: every attempt fails to connect
    events = [event(f"https://127.0.0.1:{port}/hook", task_id=f"task_{n}") for n in range(3)]
    outbox.add(events)
    secrets = WebhookSecrets(None, "k" * 32)
    await run_until(
        dispatcher(outbox, ca, secrets, backoff=Backoff(first_s=0.05, max_s=0.1)),
        lambda: all(outbox.delivery(e.event_id).attempts >= 2 for e in events),
    )
    assert all(outbox.delivery(e.event_id).state == "pending" for e in events)
    assert "connection failed" in str(outbox.delivery(events[0].event_id).last_error)
    # "Restart": the outbox reopened from its file, a new dispatcher; the receiver is back on the same port.
    reopened = StoreOutbox(tmp_path / "state")
    back = Receiver(ca, port=port)
    try:
        await run_until(
            dispatcher(reopened, ca, secrets, backoff=Backoff(first_s=0.05, max_s=0.1)),
            lambda: all(reopened.delivery(e.event_id).state == "delivered" for e in events),
        )
        assert sorted(r.headers["Vidforge-Event-Id"] for r in back.received) == sorted(e.event_id for e in events)
        assert len(await reopened.list_deliveries("alice", 10)) == 3 and await reopened.list_deliveries("bob", 10) == []
        assert (await reopened.backlog()).pending == 0
    finally:
        back.stop()


@pytest.mark.anyio
async def test_an_event_older_than_the_limit_gives_up_and_says_so(ca, receiver, outbox):
    receiver.script["/down"] = [(503, {}), (503, {})]
    one = event(receiver.url("/down"))
    outbox.add([one])
    dispatch = dispatcher(outbox, ca, WebhookSecrets(None, "k" * 32), max_age_s=1.0, backoff=Backoff(5.0, 5.0))
    await run_until(dispatch, lambda: outbox.delivery(one.event_id).state == "gave_up")
    error = str(outbox.delivery(one.event_id).last_error)
    assert error.startswith("older than VIDFORGE_WEBHOOK_MAX_AGE_S") and "answered 503" in error


@pytest.fixture
def listing_server(outbox, tmp_path) -> Iterator[str]:
    """`GET /webhooks` over the store's outbox, behind the production bearer auth, served by uvicorn on loopback."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.routing import Mount

    from serve_app._config import Config
    from serve_app.ingress._webhook_listing import webhook_routes
    from serve_app.ingress.auth import authentication
    from tests.harness import free_port

    config = Config(data_dir=str(tmp_path / "data"), max_list_items=5)
    routes = webhook_routes(outbox, config)
    app = Starlette(routes=[Mount("", routes=routes, middleware=[authentication(config, LISTING_TOKENS)])])
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, 30, 0.05, "uvicorn")
    yield f"http://127.0.0.1:{port}/mcp"
    server.should_exit = True
    thread.join(timeout=10)


LISTING_TOKENS = {"tok-alice": "alice", "tok-bob": "bob"}


def test_webhooks_list_shows_the_callers_deliveries_only(listing_server, outbox, capsys):
    from serve_app.launch.cli import main

    events = [event(f"https://hooks.example/{n}", task_id=f"task_{n}") for n in range(3)]
    outbox.add([*events, event("https://hooks.example/b", principal="bob", task_id="task_b")])
    anyio.run(
        outbox.record_attempt,
        events[0].event_id,
        Attempt(
            state=DeliveryState.GAVE_UP,
            at_ms=1,
            next_attempt_at_ms=1,
            error="the receiver answered 410, which is not retried",
        ),
    )
    assert main(["webhooks", "list", "--server", listing_server, "--token", "tok-alice", "--json"]) == 0
    page = json.loads(capsys.readouterr().out)
    assert sorted(item["event_id"] for item in page["items"]) == sorted(e.event_id for e in events)
    gone = next(item for item in page["items"] if item["event_id"] == events[0].event_id)
    assert (gone["state"], gone["attempts"], gone["next_attempt_at"]) == ("gave_up", 1, None)
    assert gone["last_error"] == "the receiver answered 410, which is not retried"
    assert all("secret" not in json.dumps(item) and "v1=" not in json.dumps(item) for item in page["items"])
    assert page["next_cursor"] is None  # all of them: fewer than a page (VIDFORGE_MAX_LIST_ITEMS, here 5)
    assert main(["webhooks", "list", "--server", listing_server, "--token", "tok-alice", "--limit", "2"]) == 0
    table = capsys.readouterr().out
    assert "2 webhooks" in table and "more with --limit" in table and "render.completed" in table
    assert main(["webhooks", "list", "--server", listing_server, "--token", "tok-bob", "--json"]) == 0
    assert [item["render_id"] for item in json.loads(capsys.readouterr().out)["items"]] == ["task_b"]


def test_webhooks_secret_prints_the_derived_secret(tmp_path, capsys, monkeypatch):
    from serve_app.launch.cli import main

    monkeypatch.setenv("VIDFORGE_REVIEW_KEY", "r" * 40)
    monkeypatch.delenv("VIDFORGE_WEBHOOK_SECRETS_FILE", raising=False)
    assert main(["webhooks", "secret", "alice", "--data-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.split() == [derived_secret("r" * 40, "alice")]
    monkeypatch.setenv("VIDFORGE_WEBHOOK_SECRETS_FILE", str(secrets_file(tmp_path, {"alice": ["whsec_2", "whsec_1"]})))
    assert main(["webhooks", "secret", "alice", "--data-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.split() == ["whsec_2", "whsec_1"]


def test_the_example_receiver_acknowledges_signed_deliveries_once_and_refuses_others(ca):
    """examples/webhook_receiver.py as a user runs it, and the verification docs/webhooks.md prints."""
    import os
    import re
    import subprocess
    import sys

    import httpx

    from tests.harness import REPO, free_port

    port = free_port()
    env = {**os.environ, "WEBHOOK_SECRET": "whsec_old,whsec_new"}
    command = [
        "examples/webhook_receiver.py",
        "--port",
        str(port),
        "--cert",
        str(ca.cert_file),
        "--key",
        str(ca.key_file),
    ]
    process = subprocess.Popen([sys.executable, *command], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    try:
        one = event("https://unused.example/")
        body = one.body.encode()

        def post(header: str) -> int:
            url = f"https://127.0.0.1:{port}/"
            with httpx.Client(verify=ca.client_context()) as client:
                return client.post(url, content=body, headers={"Vidforge-Signature": header}).status_code

        def reachable() -> bool:
            try:
                return post("t=0") == 400
            except httpx.TransportError:
                return False

        wait_until(reachable, 30, 0.1, "the example receiver")
        now = int(time.time())
        assert post(signature_header(["whsec_new"], now, body)) == 204
        assert post(signature_header(["whsec_new"], now, body)) == 204  # a repeat: acknowledged, handled once
        assert post(signature_header(["whsec_other"], now, body)) == 400
        assert post(signature_header(["whsec_old"], now - 301, body)) == 400
    finally:
        process.terminate()
        out, _ = process.communicate(timeout=30)
    assert out.splitlines() == ['render.completed task_1 succeeded {"order": "o-1"}']
    # The docs' few lines verify the same way.
    docs = (REPO / "docs/webhooks.md").read_text()
    snippet = re.search(r"```python\n(.*?)```", docs, re.S)[1]
    namespace: dict = {}
    exec(snippet, namespace)  # noqa: S102 - the docs' own example
    assert namespace["verify"](["whsec_new"], signature_header(["whsec_new"], int(time.time()), body), body)
    assert not namespace["verify"](["whsec_new"], signature_header(["whsec_new"], int(time.time()) - 301, body), body)


class Clock:
    def __init__(self) -> None:
        self.now = 1_785_333_731.0

    def __call__(self) -> float:
        return self.now


def test_the_registry_writes_each_event_with_its_change_and_the_sweep_forgets_settled_ones(tmp_path):
    from actors.task_registry import TaskRegistry
    from mcp_protocol.domain import Artifact, Succeeded
    from serve_app._config import Config

    settings = Config(data_dir=str(tmp_path), sweep_interval_s=3600).registry_settings()
    clock = Clock()
    hooked = RenderRequest(
        source_asset_uri="vidforge://assets/a_1",
        output_format="mp4",
        resolution="720p",
        notify_url="https://hooks.example/h",
        metadata={"order": "o-1"},
    )

    async def scenario() -> None:
        registry = TaskRegistry(settings, clock)
        task_id = (await registry.create("alice", hooked)).task.task_id
        quiet = (await registry.create("alice", hooked.model_copy(update={"notify_url": None}))).task.task_id
        cancelled = (await registry.create("alice", hooked)).task.task_id
        await registry.set_progress(task_id, 3, 30)  # a volatile change: nothing to tell
        assert await registry.list_webhook_deliveries("alice", 10) == []
        clock.now += 1
        await registry.request_input(task_id, 600)
        await registry.request_input(quiet, 600)
        await registry.answer_input("alice", task_id, approved=True)  # back to working: no event
        clock.now += 1
        artifact = Artifact(ext="mp4", size_bytes=10, duration_s=1.0, finished_at_ms=int(clock.now * 1000))
        await registry.finish(task_id, Succeeded(artifact=artifact))
        registry.close()
        # Written with the changes: a registry opened again on the store finds them.
        registry = TaskRegistry(settings, clock)
        clock.now += 1
        await registry.request_cancel("alice", cancelled)
        await registry.finish(cancelled, Cancelled())
        found = await registry.list_webhook_deliveries("alice", 10)
        assert [(d.event.task_id, d.event.type) for d in found] == [
            (cancelled, EventType.CANCELLED),
            (task_id, EventType.COMPLETED),
            (task_id, EventType.INPUT_REQUIRED),
        ]
        assert all(json.loads(d.event.body)["metadata"] == {"order": "o-1"} for d in found)
        assert found[2].event.review is not None and found[2].event.review.input_seq == 1
        now_ms = int(clock.now * 1000)
        due = await registry.webhooks_due(now_ms, 2, now_ms + 60_000)  # leased: not handed out again
        assert [d.event.type for d in due] == [EventType.INPUT_REQUIRED, EventType.COMPLETED]
        assert [d.event.type for d in await registry.webhooks_due(now_ms, 10, now_ms + 60_000)] == [EventType.CANCELLED]
        for delivery in due:
            settled = Attempt(state=DeliveryState.DELIVERED, at_ms=now_ms, next_attempt_at_ms=now_ms)
            await registry.record_webhook_attempt(delivery.event.event_id, settled)
        assert (await registry.webhook_backlog()).pending == 1
        clock.now += settings.result_retention_s + 1
        assert (await registry.sweep()).webhook_deliveries_dropped == 2  # the pending one stays
        assert [d.event.task_id for d in await registry.list_webhook_deliveries("alice", 10)] == [cancelled]
        registry.close()

    anyio.run(scenario)


def test_the_registry_answers_the_dispatchers_wait_when_a_change_adds_events(tmp_path):
    from actors.task_registry import TaskRegistry
    from serve_app._config import Config

    settings = Config(data_dir=str(tmp_path), sweep_interval_s=3600).registry_settings()
    hooked = RenderRequest(
        source_asset_uri="vidforge://assets/a_1",
        output_format="mp4",
        resolution="720p",
        notify_url="https://hooks.example/h",
    )

    async def scenario() -> None:
        registry = TaskRegistry(settings, Clock())
        first = await registry.webhooks_added(None, timeout_s=60)  # no token yet: answered at once
        assert await registry.webhooks_added(first, timeout_s=0.05) == first  # nothing added: after the timeout
        task_id = (await registry.create("alice", hooked)).task.task_id
        quiet = (await registry.create("alice", hooked.model_copy(update={"notify_url": None}))).task.task_id
        async with anyio.create_task_group() as group:
            answers: list[str] = []

            async def wait() -> None:
                answers.append(await registry.webhooks_added(first, timeout_s=60))

            group.start_soon(wait)
            await anyio.sleep(0.05)
            await registry.request_input(quiet, 600)  # a change without a notify_url: no event, no answer
            await anyio.sleep(0.05)
            assert answers == []
            await registry.request_input(task_id, 600)  # an input_required event: the wait ends
        assert answers and answers[0] != first
        registry.close()
        # Another registry instance (a restart): any token of the old one is answered at once.
        restarted = TaskRegistry(settings, Clock())
        assert await restarted.webhooks_added(answers[0], timeout_s=60) != answers[0]
        restarted.close()

    anyio.run(scenario)


def test_an_idle_dispatcher_waits_long_for_new_events_and_short_for_work(outbox, ca, tmp_path):
    dispatch = dispatcher(outbox, ca, WebhookSecrets(None, b"k"), poll_s=1.0, max_idle_s=30.0)
    now_ms = 1_785_333_731_000
    empty = Backlog(pending=0, oldest_created_at_ms=None, next_due_at_ms=None)
    assert dispatch.idle_wait_s(empty, now_ms) == 30.0  # nothing pending: new events end the wait
    retry = Backlog(pending=1, oldest_created_at_ms=now_ms, next_due_at_ms=now_ms + 4_000)
    assert dispatch.idle_wait_s(retry, now_ms) == 4.0  # until the retry is due
    late = Backlog(pending=1, oldest_created_at_ms=now_ms, next_due_at_ms=now_ms - 4_000)
    assert dispatch.idle_wait_s(late, now_ms) == 1.0  # due (its destination busy): a poll
    far = Backlog(pending=1, oldest_created_at_ms=now_ms, next_due_at_ms=now_ms + 3_600_000)
    assert dispatch.idle_wait_s(far, now_ms) == 30.0
    dispatch._in_flight.add("evt_1")  # an attempt under way may end and free its destination
    assert dispatch.idle_wait_s(empty, now_ms) == 1.0
