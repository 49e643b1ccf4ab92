"""Issue 8 item 1: no principal can monopolise the ingress — over real HTTP against a real `vidforge serve`.

Per-principal caps (held cluster-wide by the lease ledger) on listen streams, uploads and downloads: refused past
the cap with 429 + Retry-After + the contract's envelope, another principal unaffected, a slot freed when its
stream or upload closes and when the replica holding it dies; the `taskIds` cap; listen streams that can no
longer sleep forever; and the replica's bounded queue answering 503 + Retry-After. Caps are set low through the
environment so every limit is reached in a few requests. The ledger's rules are also checked in-process.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
from pathlib import Path

import httpx
import pytest

from serve_app.ingress.leases import LeaseLedger
from tests.harness import ServerProcess, Wire, meta, validate, wait_until
from tests.media import make_clip

TOKENS = {"tok-alice": "alice", "tok-bob": "bob"}
RETRY_AFTER_S = 5  # VIDFORGE_BUSY_RETRY_AFTER_S default
LIST_CHANGES = {"toolsListChanged": True}
DEADLINE_S = 120
# How long the small server holds a listen stream that cannot fire (VIDFORGE_LISTEN_IDLE_S): the idle test waits it
# out, and the queue test's two streams hold both request slots that long, far longer than its two requests take
# to be answered (~1 s).
LISTEN_IDLE_S = 8


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    path = tmp_path_factory.mktemp("limits-media") / "clip.mp4"
    return make_clip(str(path), seconds=1.0, width=160, height=90, audio=False)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    env = {
        "VIDFORGE_MAX_LISTEN_STREAMS": "2",
        "VIDFORGE_MAX_UPLOADS": "1",
        "VIDFORGE_MAX_DOWNLOADS": "1",
        "VIDFORGE_MAX_LISTEN_TASK_IDS": "3",
        "VIDFORGE_LEASE_TTL_S": "3",
    }
    with ServerProcess(tmp_path_factory.mktemp("limits") / "data", env=env, tokens=TOKENS) as proc:
        yield proc


@pytest.fixture(scope="module")
def small_server(tmp_path_factory):
    """Two request slots and one queue place: the replica's bound is reachable with three open streams."""
    env = {
        "VIDFORGE_MAX_ONGOING_REQUESTS": "2",
        "VIDFORGE_MAX_QUEUED_REQUESTS": "1",
        "VIDFORGE_LISTEN_IDLE_S": str(LISTEN_IDLE_S),
        "VIDFORGE_MAX_DOWNLOADS": "0",
    }
    data_dir = tmp_path_factory.mktemp("limits-small") / "data"
    with ServerProcess(data_dir, env=env, tokens=TOKENS) as proc:
        yield proc


@pytest.fixture(scope="module")
def two_replicas(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("limits-two") / "data"
    with ServerProcess(data_dir, env={"VIDFORGE_REPLICAS": "2"}) as proc:
        yield proc


class Listen:
    """One `subscriptions/listen` request, its response read as it streams."""

    def __init__(self, server, token: str, notifications: dict, tasks: bool = False) -> None:
        self.client = httpx.Client(timeout=DEADLINE_S)
        params = {"_meta": meta(tasks), "notifications": notifications}
        body = {"jsonrpc": "2.0", "id": "listen-1", "method": "subscriptions/listen", "params": params}
        headers = Wire(server.url, token=token).headers("subscriptions/listen")
        request = self.client.build_request("POST", server.url, json=body, headers=headers)
        self.response = self.client.send(request, stream=True)
        self.lines = self.response.iter_lines()

    def next_message(self) -> dict:
        for line in self.lines:
            if line.startswith("data: "):
                return json.loads(line[len("data: ") :])
        raise AssertionError("the stream ended without another message")

    def acked(self) -> bool:
        """Open and acknowledged (the request holds its slot), or refused (closed here)."""
        if self.response.status_code != 200:
            self.close()
            return False
        assert self.next_message()["method"] == "notifications/subscriptions/acknowledged"
        return True

    def refusal(self) -> tuple[httpx.Response, dict]:
        self.response.read()
        self.close()
        return self.response, self.response.json()

    def close(self) -> None:
        self.response.close()
        self.client.close()


def open_acked(server, token: str, count: int) -> list[Listen]:
    """`count` acknowledged streams. Slots of streams an earlier test closed are released asynchronously (a
    fire-and-forget call to the ledger), so a refusal right after them is retried until the deadline."""
    streams: list[Listen] = []

    def open_more() -> bool:
        stream = Listen(server, token, LIST_CHANGES)
        if stream.acked():
            streams.append(stream)
        return len(streams) == count

    wait_until(open_more, DEADLINE_S, interval=0.5, message=f"{count} open listen streams for {token}")
    return streams


def assert_limit_refusal(response: httpx.Response, body: dict, setting: str, jsonrpc: bool) -> None:
    assert response.status_code == 429, (response.status_code, body)
    assert response.headers["retry-after"] == str(RETRY_AFTER_S)
    if jsonrpc:
        validate(body, "core", "JSONRPCErrorResponse")
        envelope = body["error"]["data"]
        assert envelope["machine_code"] == "concurrency_limit_exceeded"
    else:
        envelope = body["error"]
        assert envelope["code"] == "concurrency_limit_exceeded"
    assert envelope["temporary"] is True and envelope["retry_after_ms"] == RETRY_AFTER_S * 1000
    assert setting in envelope["details"]["reason"]


@pytest.mark.ray
def test_listen_cap_refuses_past_the_limit_and_spares_others(server):
    held = open_acked(server, "tok-alice", 2)
    try:
        response, body = Listen(server, "tok-alice", LIST_CHANGES).refusal()
        assert_limit_refusal(response, body, "VIDFORGE_MAX_LISTEN_STREAMS", jsonrpc=True)
        # Another principal's streams and this principal's short requests are unaffected.
        held += open_acked(server, "tok-bob", 2)
        assert Wire(server.url, token="tok-alice").result("tools/list")["tools"]
        # A closed stream frees its slot.
        held.pop(0).close()
        reopened = wait_until(
            lambda: (s := Listen(server, "tok-alice", LIST_CHANGES)).acked() and s,
            DEADLINE_S,
            message="a closed stream's slot to be free again",
        )
        held.append(reopened)
    finally:
        for stream in held:
            stream.close()


class SlowUpload(threading.Thread):
    """An upload that trickles bytes until told to give up, then drops the connection mid-body."""

    def __init__(self, server, token: str) -> None:
        super().__init__()
        self.server, self.token = server, token
        self.give_up = threading.Event()
        self.outcome: dict = {}
        self.start()

    def trickle(self):
        while not self.give_up.wait(0.2):
            yield b"\0" * 256
        raise ConnectionAbortedError("the uploading client goes away mid-body")

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        try:
            response = httpx.post(f"{self.server.base}/assets", content=self.trickle(), headers=headers, timeout=None)
            self.outcome["status"] = response.status_code
        except (ConnectionAbortedError, httpx.HTTPError) as exc:
            self.outcome["error"] = exc

    def stop(self) -> None:
        self.give_up.set()
        self.join(DEADLINE_S)


def upload_response(server, token: str, path: str) -> httpx.Response:
    with open(path, "rb") as fh:
        headers = {"Authorization": f"Bearer {token}"}
        return httpx.post(f"{server.base}/assets", content=fh.read(), headers=headers, timeout=DEADLINE_S)


@pytest.mark.ray
def test_upload_cap_and_a_dropped_upload_frees_its_slot(server, clip):
    uploads = [SlowUpload(server, "tok-alice")]

    def second_upload_refused():
        response = upload_response(server, "tok-alice", clip)
        if response.status_code == 429:
            return response
        # The probe got the slot: the slow upload had not reached the server yet (or was refused). Start afresh;
        # the next probe comes a poll interval later.
        uploads[-1].stop()
        uploads.append(SlowUpload(server, "tok-alice"))
        return None

    try:
        refused = wait_until(second_upload_refused, DEADLINE_S, message="alice's second upload to be refused")
        assert_limit_refusal(refused, refused.json(), "VIDFORGE_MAX_UPLOADS", jsonrpc=False)
        assert upload_response(server, "tok-bob", clip).status_code == 201
    finally:
        for upload in uploads:
            upload.stop()
    assert "error" in uploads[-1].outcome, uploads[-1].outcome
    wait_until(
        lambda: upload_response(server, "tok-alice", clip).status_code == 201,
        DEADLINE_S,
        message="the dropped upload's slot to be free",
    )


@pytest.mark.ray
def test_finished_downloads_return_their_slot(server):
    """With one download slot, download after download is served: each returns its lease when it ends."""
    for _ in range(6):
        response = httpx.get(
            f"{server.base}/artifacts/task_missing/final.mp4", headers={"Authorization": "Bearer tok-alice"}
        )
        assert response.status_code == 404 and response.json()["error"]["code"] == "resource_not_found"


@pytest.mark.ray
def test_task_ids_cap_and_streams_that_cannot_fire_end_at_once(server):
    response, body = Listen(server, "tok-alice", {"taskIds": [f"task_{i}" for i in range(4)]}, tasks=True).refusal()
    assert response.status_code == 400
    validate(body, "core", "JSONRPCErrorResponse")
    assert body["error"]["code"] == -32602
    envelope = body["error"]["data"]
    assert envelope["machine_code"] == "too_many_task_ids"
    assert "VIDFORGE_MAX_LISTEN_TASK_IDS" in envelope["details"]["reason"]
    # Only unknown (or foreign) ids: acknowledged with none honoured, and the stream ends — it used to sleep forever.
    stream = Listen(server, "tok-alice", {"taskIds": ["task_a", "task_b", "task_a"]}, tasks=True)
    try:
        assert stream.response.status_code == 200
        ack = stream.next_message()
        assert ack["params"]["notifications"] == {"taskIds": []}
        assert stream.next_message()["result"]["resultType"] == "complete"
    finally:
        stream.close()


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _replica_pids(server) -> list[int]:
    pids = []
    for pid in _descendants(server.proc.pid):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"ServeReplica" in cmdline and b"McpIngress" in cmdline:
            pids.append(pid)
    return pids


def _listening_socket_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":  # 0A: LISTEN
                inodes.add(fields[9])
    return inodes


def _socket_inodes(pid: int) -> set[str]:
    """The inodes of the sockets among `pid`'s open files (none once it has exited)."""
    try:
        links = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
    except OSError:
        return set()
    return {link[8:-1] for link in links if link.startswith("socket:[")}


@pytest.mark.ray
def test_replicas_share_the_port_and_a_dead_one_is_replaced(two_replicas):
    """VIDFORGE_REPLICAS=2: both replicas listen on the public port (SO_REUSEPORT); with one killed the other
    goes on answering at once, and Serve starts a replacement that listens there too."""

    def listening_replicas() -> list[int]:
        inodes = _listening_socket_inodes(two_replicas.port)
        return [pid for pid in _replica_pids(two_replicas) if _socket_inodes(pid) & inodes]

    def two_listening(without: int | None = None) -> list[int] | None:
        now = listening_replicas()
        return now if len(now) == 2 and without not in now else None

    first = wait_until(two_listening, DEADLINE_S, 0.5, "two replicas listening")
    killed_listener = _socket_inodes(first[0]) & _listening_socket_inodes(two_replicas.port)
    assert killed_listener
    os.kill(first[0], signal.SIGKILL)
    # Gone from the kernel's listeners, not only from the process's open files: those read empty as soon as its main
    # thread has exited, while its last thread, still tearing down its memory, holds the socket, and a connection
    # the kernel hands that socket meanwhile is reset when it closes.
    wait_until(
        lambda: not killed_listener & _listening_socket_inodes(two_replicas.port),
        DEADLINE_S,
        0.2,
        "the killed replica's listener to be closed",
    )
    for _ in range(20):  # fresh connections, each answered by the survivor
        assert httpx.get(f"{two_replicas.base}/healthz", timeout=DEADLINE_S).status_code == 200
    replaced = wait_until(lambda: two_listening(without=first[0]), DEADLINE_S, 0.5, "Serve to replace the dead one")
    assert first[1] in replaced
    assert httpx.get(f"{two_replicas.base}/healthz", timeout=DEADLINE_S).status_code == 200


@pytest.mark.ray
def test_a_dead_replicas_leases_expire(server):
    """Streams held on a replica that is killed (no `finally` runs there) stop counting after the lease TTL."""
    held = open_acked(server, "tok-alice", 2)
    try:
        pids = _replica_pids(server)
        assert len(pids) == 1, pids
        os.kill(pids[0], signal.SIGKILL)
    finally:
        for stream in held:
            stream.close()
    reopened = []

    def reopen() -> bool:
        try:
            stream = Listen(server, "tok-alice", LIST_CHANGES)
        except httpx.HTTPError:  # no replica listens while Serve replaces the dead one
            return False
        if stream.response.status_code == 200 and stream.acked():
            reopened.append(stream)
        else:
            stream.close()
        return len(reopened) == 2

    try:
        wait_until(reopen, DEADLINE_S, interval=1.0, message="alice's two slots to be free after the replica died")
    finally:
        for stream in reopened:
            stream.close()


@pytest.mark.ray
def test_listen_with_only_list_changes_ends_after_the_idle_bound(small_server):
    stream = Listen(small_server, "tok-alice", LIST_CHANGES)
    try:
        assert stream.acked()
        assert stream.next_message()["result"]["resultType"] == "complete"
    finally:
        stream.close()


@pytest.mark.ray
def test_full_queue_answers_503_with_retry_after(small_server):
    """Two streams fill both request slots; of two more requests one waits in the single queue place and the
    other is refused at once, in the contract's envelope naming both settings; the waiting one is served when a
    slot frees. (The probe is a `tools/list`: `/healthz` takes no slot.)"""
    held = open_acked(small_server, "tok-alice", 2)
    results: dict[int, httpx.Response] = {}

    def probe(index: int) -> None:
        wire = Wire(small_server.url, token="tok-bob")
        try:
            results[index] = wire.request("tools/list")
        finally:
            wire.close()

    threads = [threading.Thread(target=probe, args=(i,)) for i in range(2)]
    try:
        for thread in threads:
            thread.start()
        wait_until(lambda: len(results) >= 1, DEADLINE_S, message="one probe to be answered")
        (refused,) = results.values()
        assert refused.status_code == 503, refused.text
        assert refused.headers["retry-after"] == str(RETRY_AFTER_S)
        envelope = refused.json()["error"]["data"]
        assert envelope["machine_code"] == "internal_error" and envelope["temporary"] is True
        assert envelope["retry_after_ms"] == RETRY_AFTER_S * 1000
        reason = envelope["details"]["reason"]
        assert "VIDFORGE_MAX_ONGOING_REQUESTS" in reason and "VIDFORGE_MAX_QUEUED_REQUESTS" in reason
    finally:
        for stream in held:
            stream.close()
        for thread in threads:
            thread.join(DEADLINE_S)
    assert sorted(r.status_code for r in results.values()) == [200, 503]


@pytest.mark.ray
def test_a_zero_cap_refuses_every_download(small_server):
    response = httpx.get(f"{small_server.base}/artifacts/task_x/final.mp4", headers={"Authorization": "Bearer tok-bob"})
    assert_limit_refusal(response, response.json(), "VIDFORGE_MAX_DOWNLOADS", jsonrpc=False)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_ledger_caps_per_principal_and_kind_and_releases():
    asyncio.run(_caps_and_releases())


async def _caps_and_releases():
    ledger = LeaseLedger(ttl_s=3, clock=Clock())
    assert await ledger.acquire("r1", "l1", "alice", "listen", 2)
    assert await ledger.acquire("r2", "l2", "alice", "listen", 2)  # another replica: the cap is cluster-wide
    assert not await ledger.acquire("r1", "l3", "alice", "listen", 2)
    assert await ledger.acquire("r1", "l4", "alice", "upload", 2)
    assert await ledger.acquire("r1", "l5", "bob", "listen", 2)
    await ledger.release("l1")
    await ledger.release("l1")  # a second release is harmless
    assert await ledger.acquire("r1", "l6", "alice", "listen", 2)


def test_ledger_expires_a_silent_holder_and_readopts_after_a_restart():
    asyncio.run(_expiry_and_readoption())


async def _expiry_and_readoption():
    clock = Clock()
    ledger = LeaseLedger(ttl_s=3, clock=clock)
    assert await ledger.acquire("dead", "l1", "alice", "listen", 1)
    assert await ledger.acquire("live", "l2", "bob", "listen", 1)
    for _ in range(3):
        clock.now += 2
        await ledger.heartbeat("live", {"l2": ("bob", "listen")})
    assert await ledger.acquire("live", "l3", "alice", "listen", 1)  # the silent holder's lease expired
    assert not await ledger.acquire("live", "l4", "bob", "listen", 1)  # the live one's did not
    restarted = LeaseLedger(ttl_s=3, clock=clock)
    await restarted.heartbeat("live", {"l2": ("bob", "listen"), "l3": ("alice", "listen")})
    assert not await restarted.acquire("live", "l5", "alice", "listen", 1)
    assert not await restarted.acquire("other", "l6", "bob", "listen", 1)
