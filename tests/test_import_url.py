"""Issue 35 items 1-2: `vidforge_import_asset`, safe to point at the internet.

In-process (fast): the address guard's rules, and the fetch against a real HTTPS server on loopback (a certificate
authority made here: tests/https_origin.py) through the guard's resolver seam — a real resolver function that makes
`media.test` resolve to chosen addresses — and the import desk's own limits (time, the per-principal cap, cancel),
each refusal without a byte of the remote's answer in it; and an s3:// object read from a real S3 server (moto). Then
on real servers (Ray): an import that works and renders, on both of the contract's paths, and with the default
settings each refusal the issue lists.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import aclosing
from ipaddress import ip_address
from pathlib import Path

import anyio
import httpx
import pytest
from jsonschema import Draft202012Validator

from mcp_protocol.catalog import capability_summary, tool_definitions
from mcp_protocol.desk_jobs import DeskJob
from media_store import _s3 as s3_backend
from media_store.opening import open_media_store
from serve_app._config import Config
from serve_app.desks.job_desk import DeskAtCapacity
from serve_app.importing._failures import ImportRefused, ImportUnavailable
from serve_app.importing._sources import BucketSource, WebSource, bucket_chunks, source_of
from serve_app.importing._web_fetch import FetchLimits, WebFetch, check_link, refusal_reason
from serve_app.importing.desk import ImportDesk
from serve_app.media.assets import AssetQuotaExceeded, AssetStore, AssetTooLarge
from serve_app.outbound.address_guard import AddressGuard, refused_kind, system_resolver
from serve_app.outbound.transport import trusted_roots
from tests.fast_wire import fast_wire
from tests.harness import TERMINAL, ServerProcess, Wire, poll_status, poll_task, wait_until
from tests.https_origin import SECRET, Answer, CertificateAuthority, Origin, SilentTls
from tests.media import decode_all, make_clip

MIB = 1024 * 1024
IMPORT = "vidforge_import_asset"
WAIT_S = 60  # an import ends this soon after its cancel or its time limit, on a loaded machine


@pytest.fixture(scope="module")
def ca(tmp_path_factory) -> CertificateAuthority:
    return CertificateAuthority(tmp_path_factory.mktemp("ca"))


@pytest.fixture
def origin(ca):
    server = Origin("127.0.0.1", ca)
    yield server
    server.stop()


@pytest.fixture
def origin6(ca):
    server = Origin("::1", ca)
    yield server
    server.stop()


class Names:
    """A resolver: each name answers the address lists given for it, one list per lookup, the last one repeated."""

    def __init__(self, answers: dict[str, list[list[str]]]) -> None:
        self.answers = answers
        self.lookups: list[str] = []

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.lookups.append(host)
        if host not in self.answers:
            return await system_resolver(host, port)
        served = self.answers[host]
        return served[min(self.lookups.count(host), len(served)) - 1]


def fetcher(
    ca: CertificateAuthority, allow: str = "", resolver: Callable = system_resolver, redirects: int = 5
) -> WebFetch:
    return WebFetch(AddressGuard.of(allow, resolver), FetchLimits(2 * 1024**3, redirects), ca.client_context())


async def _read(chunks: AsyncIterator[bytes]) -> bytes:
    data = b""
    async with aclosing(chunks) as stream:
        async for chunk in stream:
            data += chunk
    return data


def fetch(web: WebFetch, url: str) -> bytes:
    return asyncio.run(_read(web.chunks(url)))


def refused(web: WebFetch, url: str, kind: type[Exception] = ImportRefused) -> str:
    """The reason of the refusal; it quotes nothing of the remote's answer."""
    with pytest.raises(kind) as refusal:
        fetch(web, url)
    reason = str(refusal.value)
    assert SECRET not in reason, reason
    return reason


# -- the guard's rules ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "address, kind",
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("169.254.169.254", "cloud metadata"),
        ("fd00:ec2::254", "cloud metadata"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("10.0.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fd12::1", "private"),
        ("100.64.0.1", "shared (carrier-grade NAT)"),
        ("224.0.0.1", "multicast"),  # is_global alone passes it
        ("ff02::1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("240.0.0.1", "private"),
        ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped: judged as the IPv4 address it reaches
        ("::ffff:10.1.2.3", "private"),
        ("64:ff9b::a9fe:a9fe", "cloud metadata"),  # NAT64 to 169.254.169.254
        ("2002:7f00:1::1", "loopback"),  # 6to4 around 127.0.0.1: is_global alone passes it
        ("2001:db8::1", "private"),
    ],
)
def test_every_address_that_is_not_public_is_refused(address, kind):
    assert refused_kind(ip_address(address)) == kind
    refused = AddressGuard().refusal(address, ip_address(address))
    assert refused is not None and refused.kind == kind
    reason = refusal_reason(refused)
    assert f"{address} is a {kind} address" in reason and "VIDFORGE_IMPORT_ALLOW_HOSTS" in reason


@pytest.mark.parametrize("address", ["93.184.215.14", "8.8.8.8", "2606:4700::1111", "64:ff9b::808:808"])
def test_public_addresses_pass(address):
    assert refused_kind(ip_address(address)) is None
    assert AddressGuard().refusal("media.example", ip_address(address)) is None


def test_the_allow_list_takes_networks_and_host_names():
    guard = AddressGuard.of(" 127.0.0.0/8, fd00::/8 ,Media.Internal, 10.0.0.7")
    assert guard.refusal("127.0.0.1", ip_address("127.0.0.1")) is None
    assert guard.refusal("a.example", ip_address("::ffff:127.0.0.5")) is None  # the network, mapped or not
    assert guard.refusal("media.internal.", ip_address("192.168.0.9")) is None  # a listed host: any address
    assert guard.refusal("a.example", ip_address("10.0.0.7")) is None
    assert guard.refusal("a.example", ip_address("10.0.0.8")) is not None
    assert guard.refusal("a.example", ip_address("169.254.169.254")) is not None
    check_link(guard, "http", "media.internal", False)  # plain http for a listed host, and a listed address
    check_link(guard, "http", "127.0.0.1", False)
    for scheme, host, userinfo in [("http", "a.example", False), ("ftp", "media.internal", False)]:
        with pytest.raises(ImportRefused):
            check_link(guard, scheme, host, userinfo)
    with pytest.raises(ImportRefused, match="user name or password"):
        check_link(guard, "https", "media.internal", True)


def test_what_a_url_names():
    guard = AddressGuard()
    assert source_of("https://media.example/a/clip%201.mp4", None, guard) == WebSource(
        "https://media.example/a/clip%201.mp4", "media.example"
    )
    assert WebSource("https://media.example/a/clip%201.mp4", "media.example").label == "clip 1.mp4"
    store = "s3://media-bucket/vidforge"
    assert source_of("s3://media-bucket/incoming/clip.mp4", store, guard) == BucketSource(
        "media-bucket", "incoming/clip.mp4"
    )
    refusals = {
        "http://media.example/clip.mp4": "plain http",
        "file:///etc/passwd": "scheme",
        "vidforge://assets/a_1": "scheme",
        "https://user:pw@media.example/clip.mp4": "user name or password",
        "s3://other-bucket/clip.mp4": "own bucket",
        "s3://media-bucket/vidforge/assets/a_1/blob": "vidforge's own files",
        "s3://media-bucket/vidforge/artifacts/task_1/final.mp4": "vidforge's own files",
    }
    for url, why in refusals.items():
        with pytest.raises(ImportRefused, match=why):
            source_of(url, store, guard)
    with pytest.raises(ImportRefused, match="VIDFORGE_STORAGE_URL"):
        source_of("s3://media-bucket/incoming/clip.mp4", None, guard)


# -- the fetch, through the guard, against a real HTTPS server --------------------------------------------------


def test_a_fetch_connects_to_the_address_it_checked_with_the_name_kept_for_tls(ca, origin):
    origin.answers["/clip.mp4"] = Answer(body=b"the file's bytes")
    names = Names({"media.test": [["127.0.0.1"], ["169.254.169.254"]]})  # what a rebinding DNS server answers
    web = fetcher(ca, "127.0.0.1/32", names)
    assert fetch(web, origin.url("/clip.mp4", host="media.test")) == b"the file's bytes"
    assert names.lookups == ["media.test"]  # resolved once; the connection went to that answer, not a second one
    (seen,) = origin.seen
    assert (seen.server_name, seen.host, seen.local_address) == ("media.test", f"media.test:{origin.port}", "127.0.0.1")


def test_a_name_that_rebinds_is_checked_again_on_its_next_connect(ca, origin):
    """An allowed address first, a refused one next: the second connection (a redirect to the same name) resolves
    again and is refused there, the address it would have reached never contacted."""
    origin.answers["/hop"] = Answer(302, SECRET.encode(), location=f"https://media.test:{origin.port}/clip.mp4")
    origin.answers["/clip.mp4"] = Answer(body=SECRET.encode())
    names = Names({"media.test": [["127.0.0.1"], ["169.254.169.254"]]})
    reason = refused(fetcher(ca, "127.0.0.1/32", names), origin.url("/hop", host="media.test"))
    assert "media.test resolves to 169.254.169.254, a cloud metadata address" in reason
    assert names.lookups == ["media.test", "media.test"] and origin.paths() == ["/hop"]


def test_a_name_with_any_refused_address_is_refused_whole(ca, origin):
    """An allowed address first and a refused one next in the same answer: refused before any connection."""
    origin.answers["/clip.mp4"] = Answer(body=SECRET.encode())
    names = Names({"media.test": [["127.0.0.1", "10.0.0.1"]]})
    reason = refused(fetcher(ca, "127.0.0.1/32", names), origin.url("/clip.mp4", host="media.test"))
    assert "media.test resolves to 10.0.0.1, a private address" in reason
    assert origin.seen == []


def test_default_settings_refuse_loopback_metadata_and_private_addresses(ca, origin, origin6):
    """127.0.0.1 (also as `localhost`, through the system's resolver), [::1], 169.254.169.254 and 10.0.0.1: refused
    before a connection is opened; the two loopback servers listening there are never contacted."""
    for server in (origin, origin6):
        server.answers["/clip.mp4"] = Answer(body=SECRET.encode())
    web = fetcher(ca)
    expected = {
        origin.url("/clip.mp4"): "127.0.0.1 is a loopback address",
        origin.url("/clip.mp4", host="localhost"): "localhost resolves to 127.0.0.1, a loopback address",
        origin6.url("/clip.mp4"): "::1 is a loopback address",
        "https://169.254.169.254/latest/meta-data/": "169.254.169.254 is a cloud metadata address",
        "https://10.0.0.1/clip.mp4": "10.0.0.1 is a private address",
        "https://[::ffff:127.0.0.1]:443/clip.mp4": "::ffff:127.0.0.1 is a loopback address",
    }
    for url, why in expected.items():
        assert why in refused(web, url), url
    assert origin.seen == [] and origin6.seen == []


def test_a_redirect_from_an_allowed_host_to_a_refused_one_is_refused(ca, origin, origin6):
    origin6.answers["/clip.mp4"] = Answer(body=SECRET.encode())
    origin.answers["/to-v6"] = Answer(302, SECRET.encode(), location=origin6.url("/clip.mp4"))
    origin.answers["/to-metadata"] = Answer(301, SECRET.encode(), location="https://169.254.169.254/latest/meta-data/")
    origin.answers["/to-private"] = Answer(307, SECRET.encode(), location="https://10.0.0.1/clip.mp4")
    web = fetcher(ca, "127.0.0.1/32")
    assert "::1 is a loopback address" in refused(web, origin.url("/to-v6"))
    assert "169.254.169.254 is a cloud metadata address" in refused(web, origin.url("/to-metadata"))
    assert "10.0.0.1 is a private address" in refused(web, origin.url("/to-private"))
    assert origin.paths() == ["/to-v6", "/to-metadata", "/to-private"] and origin6.seen == []


def test_plain_http_only_for_a_host_the_operator_lists():
    plain = Origin("127.0.0.1")  # no TLS
    try:
        plain.answers["/clip.mp4"] = Answer(body=b"plain bytes")
        guard = AddressGuard()
        with pytest.raises(ImportRefused, match="plain http is refused for localhost"):
            source_of(plain.url("/clip.mp4", host="localhost"), None, guard)
        web = WebFetch(AddressGuard.of("localhost"), FetchLimits(MIB, 5), trusted_roots())
        assert fetch(web, plain.url("/clip.mp4", host="localhost")) == b"plain bytes"
        # ... and a redirect from there to plain http elsewhere is refused like a first link would be
        plain.answers["/away"] = Answer(302, location="http://media.example/clip.mp4")
        assert "plain http is refused for media.example" in refused(web, plain.url("/away", host="localhost"))
        assert plain.paths() == ["/clip.mp4", "/away"]
    finally:
        plain.stop()


def test_more_redirects_than_the_limit_are_refused(ca, origin):
    origin.answers["/loop"] = Answer(302, SECRET.encode(), location="/loop")
    reason = refused(fetcher(ca, "127.0.0.1/32", redirects=2), origin.url("/loop"))
    assert "redirects more than 2 times (VIDFORGE_IMPORT_MAX_REDIRECTS)" in reason
    assert origin.paths() == ["/loop"] * 3


def test_a_declared_length_past_the_limit_is_refused_before_the_body(ca, origin):
    origin.answers["/huge.mp4"] = Answer(body=SECRET.encode(), declared=3 * 1024**3)
    with pytest.raises(AssetTooLarge) as too_large:
        fetch(fetcher(ca, "127.0.0.1/32"), origin.url("/huge.mp4"))
    assert SECRET not in str(too_large.value)


@pytest.mark.parametrize(
    "limit, refusal",
    [({"max_asset_bytes": MIB}, AssetTooLarge), ({"max_asset_bytes_per_principal": MIB}, AssetQuotaExceeded)],
    ids=["asset-limit", "principal-quota"],
)
def test_a_body_past_a_limit_is_cut_while_it_streams(ca, origin, tmp_path, limit, refusal):
    """No length declared (chunked): the store counts the bytes as they come (AssetStore.add_stream, the upload's
    own path), refuses past VIDFORGE_MAX_ASSET_BYTES or the principal's quota, and keeps nothing."""
    origin.answers["/endless.mp4"] = Answer(body=b"\0" * (8 * MIB), chunked=True)
    store = AssetStore(Config(data_dir=str(tmp_path), **limit))
    web = fetcher(ca, "127.0.0.1/32")

    async def add() -> None:
        async with aclosing(web.chunks(origin.url("/endless.mp4"))) as chunks:
            await store.add_stream(chunks, "alice", "endless.mp4")

    with pytest.raises(refusal):
        asyncio.run(add())
    assert store.media.list("assets/") == []


def test_the_remote_answer_is_never_quoted(ca, origin):
    origin.answers["/gone"] = Answer(404, SECRET.encode())
    origin.answers["/broken"] = Answer(503, SECRET.encode())
    origin.answers["/nowhere"] = Answer(302, SECRET.encode())  # a redirect without a Location
    web = fetcher(ca, "127.0.0.1/32")
    assert "answered HTTP 404" in refused(web, origin.url("/gone"))
    assert "answered HTTP 503" in refused(web, origin.url("/broken"), ImportUnavailable)
    assert "without saying where to" in refused(web, origin.url("/nowhere"), ImportUnavailable)


def test_a_certificate_that_does_not_verify_is_not_trusted(origin):
    origin.answers["/clip.mp4"] = Answer(body=SECRET.encode())
    web = WebFetch(AddressGuard.of("127.0.0.1/32"), FetchLimits(MIB, 5), trusted_roots())  # the system's roots
    assert "TLS certificate of 127.0.0.1 could not be verified" in refused(
        web, origin.url("/clip.mp4"), ImportUnavailable
    )


@pytest.mark.anyio
async def test_a_fetch_and_the_origins_stop_are_not_held_up_by_a_client_silent_mid_handshake(ca):
    """A client that connected and never finished its TLS handshake (what an import cancelled mid-handshake left
    behind before it closed its connection, and what any client may do). The origin an import test
    fetches from still answers the next client and still stops; it used to handshake as it accepted, so one such
    client held up every later fetch and the test's teardown for good."""
    server = Origin("127.0.0.1", ca, {"/clip.mp4": Answer(body=b"the file's bytes")})
    silent = socket.create_connection(("127.0.0.1", server.port))
    try:
        with anyio.fail_after(WAIT_S):
            assert await _read(fetcher(ca, "127.0.0.1/32").chunks(server.url("/clip.mp4"))) == b"the file's bytes"
    finally:
        stopping = threading.Thread(target=server.stop, daemon=True)
        stopping.start()
        stopping.join(WAIT_S)
        silent.close()
    assert not stopping.is_alive(), "the origin did not stop"


@pytest.mark.anyio
async def test_an_import_cancelled_mid_handshake_closes_its_connection(ca):
    """A fetch cancelled while the TLS handshake waits (the import's time limit, or its cancel) closes its socket:
    one left open would stay registered in the desk's event loop for as long as the host keeps the connection, so
    a host that stalls every handshake could use up the desk's file descriptors one import at a time."""
    host = SilentTls()
    try:
        web = fetcher(ca, "127.0.0.1/32")
        for _ in range(3):
            with anyio.move_on_after(0.5):
                await _read(web.chunks(f"https://127.0.0.1:{host.port}/clip.mp4"))
        wait_until(lambda: len(host.accepted) == 3, WAIT_S, message="three connections")
        wait_until(lambda: host.open_to_it() == 0, WAIT_S, message="every connection closed by the fetch")
    finally:
        host.close()


@pytest.mark.slow  # a real S3 server process (moto)
def test_an_object_of_the_servers_own_bucket_is_read_with_its_credentials(s3_server, monkeypatch, tmp_path):
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    s3_backend._bucket.cache_clear()  # clients are built from the environment, once per process
    try:
        bucket = open_media_store(f"s3://{s3_server.bucket}", str(tmp_path))
        bucket.put_bytes("incoming/clip.mp4", b"x" * (3 * MIB + 5))
        source = source_of(f"s3://{s3_server.bucket}/incoming/clip.mp4", f"s3://{s3_server.bucket}/vf", AddressGuard())
        assert asyncio.run(_read(bucket_chunks(source, str(tmp_path), 4 * MIB))) == b"x" * (3 * MIB + 5)
        with pytest.raises(AssetTooLarge):
            asyncio.run(_read(bucket_chunks(source, str(tmp_path), MIB)))
        with pytest.raises(ImportRefused, match="there is no object at"):
            asyncio.run(_read(bucket_chunks(BucketSource(s3_server.bucket, "incoming/none.mp4"), str(tmp_path), MIB)))
    finally:
        s3_backend._bucket.cache_clear()


# -- the import desk's own limits, in this process (nothing here reaches the media parse) ---------------------


def desk_of(tmp_path: Path, ca: CertificateAuthority, monkeypatch, **settings) -> ImportDesk:
    monkeypatch.setenv("SSL_CERT_FILE", str(ca.ca_file))  # how an operator (and the server tests) trust a CA
    config = Config(data_dir=str(tmp_path / "data"), import_allow_hosts="127.0.0.1/32", **settings)
    return ImportDesk(config.to_json())


async def ended(desk: ImportDesk, job: DeskJob) -> DeskJob:
    """The import once it has ended (cancelled, or at its time limit): a test fails past `WAIT_S`, never hangs."""
    with anyio.fail_after(WAIT_S):
        done = await desk.wait(job.principal, job.task_id)
    assert done is not None, job
    return done


def envelope(job: DeskJob) -> dict:
    assert job.status == "completed" and job.result is not None and job.result["isError"] is True, job
    assert SECRET not in json.dumps(job.result)
    return job.result["structuredContent"]


@pytest.mark.anyio
async def test_an_import_past_its_time_limit_ends_as_import_failed(tmp_path, ca, origin, monkeypatch):
    origin.answers["/slow.mp4"] = Answer(body=SECRET.encode(), declared=MIB, stall=True)
    desk = desk_of(tmp_path, ca, monkeypatch, import_timeout_s=0.5)
    job = await desk.start("alice", WebSource(origin.url("/slow.mp4"), "127.0.0.1"))
    error = envelope(await ended(desk, job))
    assert error["code"] == "import_failed" and error["temporary"] is True
    assert "longer than 0.5 s (VIDFORGE_IMPORT_TIMEOUT_S)" in error["details"]["reason"]
    assert error["repair"] == {
        "next_step": "retry_import",
        "tool": "vidforge_import_asset",
        "arguments": {"url": origin.url("/slow.mp4")},
        "alternative": error["repair"]["alternative"],
    }
    assert desk.assets.media.list("assets/") == []


@pytest.mark.anyio
async def test_imports_per_principal_are_capped_and_a_cancel_keeps_nothing(tmp_path, ca, origin, monkeypatch):
    """In this process: the desk, and the origin, which holds each body back (stall) so the imports stay open."""
    origin.answers["/slow.mp4"] = Answer(body=SECRET.encode(), declared=MIB, stall=True)
    desk = desk_of(tmp_path, ca, monkeypatch, max_imports=1)
    source = WebSource(origin.url("/slow.mp4"), "127.0.0.1")
    first = await desk.start("alice", source)
    with pytest.raises(DeskAtCapacity) as capped:
        await desk.start("alice", source)
    assert (capped.value.active, capped.value.limit) == (1, 1)
    other = await desk.start("bob", source)  # the cap is each principal's own
    assert await desk.get("bob", first.task_id) is None  # and so are the imports
    cancelling = await desk.cancel("alice", first.task_id)
    assert cancelling is not None and cancelling.status == "working"  # cooperative: it ends on its own
    first_end = await ended(desk, first)
    assert first_end.status == "cancelled" and first_end.result is None
    again = await desk.start("alice", source)  # the slot is free again
    for job in (other, again):  # cancelled wherever they are: resolving, connecting, mid-handshake, mid-body
        await desk.cancel(job.principal, job.task_id)
        assert (await ended(desk, job)).status == "cancelled"
    assert desk.assets.media.list("assets/") == []


@pytest.mark.anyio
async def test_a_refused_address_ends_the_imports_task_with_the_envelope(tmp_path, ca, origin6, monkeypatch):
    origin6.answers["/clip.mp4"] = Answer(body=SECRET.encode())
    desk = desk_of(tmp_path, ca, monkeypatch)
    job = await desk.start("alice", WebSource(origin6.url("/clip.mp4"), "::1"))
    assert job.task_id.startswith("import_") and job.status == "working"
    error = envelope(await ended(desk, job))
    assert error["code"] == "import_refused" and error["temporary"] is False and error["details"]["field"] == "url"
    assert "::1 is a loopback address" in error["details"]["reason"] and error["repair"]["next_step"]
    assert origin6.seen == []


# -- the tool on the wire, in this process (FastWire: the production /mcp, the import desk in this process) ----


def test_the_tool_follows_the_contracts_conventions():
    tools = {tool["name"]: tool for tool in tool_definitions(Config())}
    tool = tools["vidforge_import_asset"]
    assert tool["annotations"] == {
        "readOnlyHint": False,
        "destructiveHint": False,
        "idempotentHint": False,
        "openWorldHint": True,
    }
    assert tool["inputSchema"]["required"] == ["url"] and tool["inputSchema"]["additionalProperties"] is False
    assert "5 minutes" in tool["description"] and "io.modelcontextprotocol/tasks" in tool["description"]
    published = {entry["code"]: entry["temporary"] for entry in capability_summary(Config())["error_catalog"]}
    inline = tool["_meta"]["com.vidforge/errors"]
    assert {"import_refused", "import_failed", "asset_too_large"} <= {entry["code"] for entry in inline}
    assert all(published[entry["code"]] == entry["temporary"] for entry in inline)
    assert (
        tool["outputSchema"]["properties"]["follow_up"]
        == tools["vidforge_render_video"]["outputSchema"]["properties"]["follow_up"]
    )


@pytest.fixture(scope="module")
def fast(tmp_path_factory):
    with fast_wire(tmp_path_factory.mktemp("fast-import")) as wire:
        yield wire


def test_a_refused_link_on_both_paths_of_the_wire(fast):
    """The fallback answers the refusal itself; a tasks request gets a task whose completed result is the same
    envelope; the task is its principal's own."""
    url = "https://10.0.0.1/clip.mp4"
    refused_now = fast.tool(IMPORT, {"url": url})
    assert refused_now["isError"] is True and refused_now["structuredContent"]["code"] == "import_refused"
    created = fast.tool(IMPORT, {"url": url}, tasks=True)
    assert created["resultType"] == "task" and created["taskId"].startswith("import_")
    task_id = created["taskId"]
    ended = wait_until(lambda: (t := fast.task("tasks/get", task_id)["result"])["status"] != "working" and t, 30)
    assert ended["status"] == "completed" and ended["result"]["isError"] is True
    error = ended["result"]["structuredContent"]
    assert (error["code"], error["details"]["field"]) == ("import_refused", "url")
    assert "10.0.0.1 is a private address" in error["details"]["reason"]
    assert fast.task("tasks/get", task_id, token="tok-bob")["error"]["code"] == -32602  # another principal's
    assert fast.task("tasks/get", "import_unknown")["error"]["code"] == -32602
    assert fast.task("tasks/update", task_id, params={"inputResponses": {}})["result"]["resultType"] == "complete"
    assert fast.task("tasks/cancel", task_id)["result"]["resultType"] == "complete"
    assert fast.task("tasks/get", task_id)["result"]["status"] == "completed"  # an ended import stays as it ended
    assert fast.call("tasks/get", {"taskId": task_id}, task_id)["error"]["code"] == -32021  # tasks not declared


def test_a_link_refused_before_anything_is_fetched_answers_at_once(fast):
    """Its scheme, credentials or bucket: a tool error, no task, on either path."""
    for url, why in [
        ("http://media.example/clip.mp4", "plain http is refused"),
        ("s3://media-bucket/clip.mp4", "VIDFORGE_STORAGE_URL"),
        ("https://me:secret@media.example/clip.mp4", "user name or password"),
    ]:
        for tasks in (False, True):
            result = fast.tool(IMPORT, {"url": url}, tasks=tasks)
            assert result["isError"] is True and result["structuredContent"]["code"] == "import_refused", url
            assert why in result["structuredContent"]["details"]["reason"]
            assert "secret" not in result["structuredContent"]["details"]["reason"]


# -- real servers (Ray): the shared server may import from 127.0.0.1 (tests/conftest.py); one of this module's own
# runs with the default settings ----------------------------------------------------------------------------

TOKENS = {"tok-import": "importer", "tok-import-other": "importer-other"}  # on the shared server (conftest.py)
TOKEN = "tok-import"


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    return Path(make_clip(str(tmp_path_factory.mktemp("import-media") / "clip.mp4"), 2.0, 320, 180, audio=True))


def import_error(wire: Wire, url: str) -> dict:
    """The envelope of a refused import (on the fallback path: the call's own result); nothing of the remote's in it."""
    result = wire.tool(IMPORT, {"url": url})
    assert result["isError"] is True, result
    assert SECRET not in json.dumps(result)
    return result["structuredContent"]


@pytest.mark.ray
def test_an_import_works_on_both_paths_and_renders(shared_server, media_origin, clip, tmp_path):
    media_origin.answers["/works/clip.mp4"] = Answer(body=clip.read_bytes())
    url = media_origin.url("/works/clip.mp4")
    wire, tasks = Wire(shared_server.url, token=TOKEN), Wire(shared_server.url, token=TOKEN, tasks=True)
    try:
        output_schema = next(t for t in wire.result("tools/list")["tools"] if t["name"] == IMPORT)["outputSchema"]
        # Without the tasks extension: the call waits for the import and answers with the asset.
        imported = wire.tool(IMPORT, {"url": url})
        assert imported["isError"] is False, imported
        asset = imported["structuredContent"]
        Draft202012Validator(output_schema).validate(asset)
        assert (
            asset["asset_uri"].startswith("vidforge://assets/") and asset["asset_uri"] in imported["content"][0]["text"]
        )
        assert (asset["kind"], asset["width"], asset["height"], asset["filename"]) == ("video", 320, 180, "clip.mp4")
        assert (asset["video_codec"], asset["audio_codec"], asset["size_bytes"]) == ("h264", "aac", clip.stat().st_size)
        assert asset["duration_seconds"] == pytest.approx(2.0, abs=0.1)
        follow_up = asset["follow_up"]
        assert follow_up["tool"] == "vidforge_render_video"
        assert follow_up["arguments"]["source_asset_uri"] == asset["asset_uri"]
        # With it: a task, polled to its completed result, the asset another one.
        created = tasks.tool(IMPORT, {"url": url})
        assert created["resultType"] == "task" and created["taskId"].startswith("import_")
        done = poll_task(tasks, created["taskId"], lambda t: t["status"] in TERMINAL)
        assert done["status"] == "completed" and done["result"]["isError"] is False, done
        second = done["result"]["structuredContent"]
        assert second["asset_uri"] != asset["asset_uri"] and second["size_bytes"] == asset["size_bytes"]
        other = Wire(shared_server.url, token="tok-import-other", tasks=True)
        assert other.task("tasks/get", created["taskId"])["error"]["code"] == -32602  # the importer's own
        other.close()
        # ... and the asset renders: the follow_up's call, as it stands.
        accepted = wire.tool("vidforge_render_video", follow_up["arguments"])["structuredContent"]
        final = poll_status(wire, accepted["render_id"], lambda s: s["terminal"])
        assert final["state"] == "succeeded", final
        video = tmp_path / "final.mp4"
        headers = {"Authorization": f"Bearer {TOKEN}"}
        download = httpx.get(f"{shared_server.base}/artifacts/{accepted['render_id']}/final.mp4", headers=headers)
        video.write_bytes(download.raise_for_status().content)
        decoded, source = decode_all(str(video), keep="none"), decode_all(str(clip), keep="none")
        assert (decoded.width, decoded.height, decoded.frame_count) == (1280, 720, source.frame_count)
    finally:
        wire.close()
        tasks.close()
    assert media_origin.paths().count("/works/clip.mp4") == 2


@pytest.mark.ray
def test_refusals_past_the_first_hop_and_the_limits(shared_server, media_origin, import_ca):
    """From the allowed 127.0.0.1: redirects to [::1] (loopback, not allowed here) and to the metadata address, a
    redirect loop, a length past the asset limit, a file that is not media, and a 404: each a contract error naming
    its rule, without a byte of the remote's answer."""
    v6 = Origin("::1", import_ca, {"/clip.mp4": Answer(body=SECRET.encode())})
    wire = Wire(shared_server.url, token=TOKEN)
    try:
        media_origin.answers.update(
            {
                "/refused/to-v6": Answer(302, SECRET.encode(), location=v6.url("/clip.mp4")),
                "/refused/to-metadata": Answer(302, SECRET.encode(), location="https://169.254.169.254/latest/"),
                "/refused/loop": Answer(302, SECRET.encode(), location="/refused/loop"),
                "/refused/huge.mp4": Answer(body=SECRET.encode(), declared=3 * 1024**3),
                "/refused/page.html": Answer(body=f"<html><body>{SECRET}</body></html>".encode()),
            }
        )
        to_v6 = import_error(wire, media_origin.url("/refused/to-v6"))
        assert to_v6["code"] == "import_refused" and "::1 is a loopback address" in to_v6["details"]["reason"]
        to_metadata = import_error(wire, media_origin.url("/refused/to-metadata"))
        assert "169.254.169.254 is a cloud metadata address" in to_metadata["details"]["reason"]
        loop = import_error(wire, media_origin.url("/refused/loop"))
        assert "more than 5 times (VIDFORGE_IMPORT_MAX_REDIRECTS)" in loop["details"]["reason"]
        huge = import_error(wire, media_origin.url("/refused/huge.mp4"))
        assert (huge["code"], huge["details"]["field"]) == ("asset_too_large", "url")
        assert "VIDFORGE_MAX_ASSET_BYTES" in huge["details"]["reason"] and huge["repair"] is not None
        page = import_error(wire, media_origin.url("/refused/page.html"))
        assert page["code"] == "unsupported_codec" and page["details"]["field"] == "url"
        gone = import_error(wire, media_origin.url("/refused/gone.mp4"))
        assert gone["code"] == "import_refused" and "answered HTTP 404" in gone["details"]["reason"]
        every = [to_v6, to_metadata, loop, huge, page, gone]
        assert all(error["repair"] and error["repair"]["next_step"] for error in every)
    finally:
        wire.close()
        v6.stop()
    assert v6.seen == []
    assert media_origin.paths().count("/refused/loop") == 6


@pytest.mark.ray
def test_imports_at_once_are_capped_and_a_task_cancels(shared_server, media_origin):
    media_origin.answers["/capped/slow.mp4"] = Answer(body=SECRET.encode(), declared=MIB, stall=True)
    url = media_origin.url("/capped/slow.mp4")
    tasks = Wire(shared_server.url, token=TOKEN, tasks=True)
    try:
        running = [tasks.tool(IMPORT, {"url": url})["taskId"] for _ in range(2)]  # VIDFORGE_MAX_IMPORTS: 2
        capped = tasks.tool(IMPORT, {"url": url})
        assert capped["isError"] is True and capped["structuredContent"]["code"] == "concurrency_limit_exceeded"
        assert "VIDFORGE_MAX_IMPORTS" in capped["structuredContent"]["details"]["reason"]
        for task_id in running:
            assert tasks.task("tasks/cancel", task_id)["result"]["resultType"] == "complete"
        for task_id in running:
            assert poll_task(tasks, task_id, lambda t: t["status"] in TERMINAL)["status"] == "cancelled"
    finally:
        tasks.close()


@pytest.fixture(scope="module")
def default_server(tmp_path_factory, import_ca):
    """A server with the import settings at their defaults; it trusts the test CA, so a fetch would succeed. Its
    imports are refused before any render."""
    with ServerProcess(
        tmp_path_factory.mktemp("import-defaults") / "data",
        env={"SSL_CERT_FILE": str(import_ca.ca_file)},
    ) as proc:
        yield proc


def desk_processes(server: ServerProcess) -> list[int]:
    return [pid for pid, title in server.processes() if title.startswith("ray::ImportDesk")]


@pytest.mark.ray
def test_the_import_desk_starts_with_the_first_import(default_server, import_ca):
    """A server that imports nothing runs no process for it: asking about an import starts none (and answers as
    for any unknown task); the first import starts the desk, which answers from then on."""
    tasks = Wire(default_server.url, tasks=True)
    try:
        unknown = tasks.task("tasks/get", "import_0000000000000000000000000a")
        assert unknown["error"]["code"] == -32602, unknown
        assert desk_processes(default_server) == []
        created = tasks.tool(IMPORT, {"url": "https://10.0.0.1/clip.mp4"})  # refused by the desk: it runs now
        ended = poll_task(tasks, created["taskId"], lambda t: t["status"] in TERMINAL)
        assert ended["result"]["structuredContent"]["code"] == "import_refused", ended
        assert len(desk_processes(default_server)) == 1
    finally:
        tasks.close()


@pytest.mark.ray
def test_the_default_settings_refuse_loopback_metadata_private_and_plain_http(default_server, import_ca):
    v4 = Origin("127.0.0.1", import_ca, {"/clip.mp4": Answer(body=SECRET.encode())})
    v6 = Origin("::1", import_ca, {"/clip.mp4": Answer(body=SECRET.encode())})
    wire, tasks = Wire(default_server.url), Wire(default_server.url, tasks=True)
    try:
        expected = {
            v4.url("/clip.mp4"): "127.0.0.1 is a loopback address",
            v4.url("/clip.mp4", host="localhost"): "localhost resolves to 127.0.0.1, a loopback address",
            v6.url("/clip.mp4"): "::1 is a loopback address",
            "https://169.254.169.254/latest/meta-data/": "169.254.169.254 is a cloud metadata address",
            "https://10.0.0.1/clip.mp4": "10.0.0.1 is a private address",
        }
        for url, why in expected.items():
            error = import_error(wire, url)
            assert error["code"] == "import_refused" and why in error["details"]["reason"], (url, error)
            assert "VIDFORGE_IMPORT_ALLOW_HOSTS" in error["details"]["reason"]
        plain = import_error(wire, v4.url("/clip.mp4").replace("https://", "http://"))
        assert "plain http is refused" in plain["details"]["reason"]
        # the same refusal on the task path: the task completes with the envelope
        created = tasks.tool(IMPORT, {"url": v4.url("/clip.mp4")})
        ended = poll_task(tasks, created["taskId"], lambda t: t["status"] in TERMINAL)
        assert ended["status"] == "completed" and ended["result"]["structuredContent"]["code"] == "import_refused"
        assert SECRET not in json.dumps(ended)
    finally:
        wire.close()
        tasks.close()
        v4.stop()
        v6.stop()
    assert v4.seen == [] and v6.seen == []
