"""Direct transfers with the media in a bucket (VIDFORGE_STORAGE_URL), against the real S3 REST server the suite
uses (moto's standalone server, tests/s3_server.py): the bytes go between the client and the bucket, not through
the server.

- Downloads (`GET /artifacts/…`, the watch page's video and download) answer 307 with a presigned URL of the object:
  it fetches the bytes (Range requests too), and it expires. moto serves presigned URLs without checking them, so
  the expiry is shown as S3 enforces it: the URL is a SigV4 query signature, checked here independently (with the
  bucket's secret, from first principles), over an `X-Amz-Expires` of VIDFORGE_PRESIGNED_URL_TTL_S counted from
  the moment of the request; a URL with another expiry does not carry that signature.
- Uploads: `POST /assets/uploads` opens a presigned multipart upload, the client PUTs the parts to the bucket, and
  `…/complete` vets the file as any upload (the isolated parse, every limit, the quota): a video then renders; a
  file that is not media, one larger than declared past the limit, and one past its time are refused, and nothing
  of them stays in the bucket. Another principal's upload id completes nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import parse_qsl, quote, urljoin, urlsplit

import httpx
import m3u8
import pytest

from mcp_protocol.streams import STREAM_META_KEY
from serve_app._config import Config
from serve_app.ingress._direct_uploads import PURPOSE, TICKET_ROUND, Ticket
from serve_app.ingress.review.capability import ReviewCapability, ReviewSigner
from serve_app.launch._review_key import KEY_FILE
from tests.harness import TERMINAL, ServerProcess, Wire, poll_task
from tests.media import make_clip

pytestmark = pytest.mark.ray

TOKENS = {"tok-direct-alice": "alice", "tok-direct-bob": "bob"}
ALICE, BOB = TOKENS
PREFIX = "direct"
MIB = 1024 * 1024
URL_TTL_S = 120
MAX_ASSET_BYTES = 12 * MIB
QUOTA_BYTES = 11 * MIB
PART_BYTES = 8 * MIB  # media_store._s3.PART_BYTES: a 9 MiB file goes in two parts


@pytest.fixture(scope="module")
def server(s3_server, tmp_path_factory):
    env = {
        **s3_server.env,
        "VIDFORGE_STORAGE_URL": f"s3://{s3_server.bucket}/{PREFIX}",
        "VIDFORGE_PRESIGNED_URL_TTL_S": str(URL_TTL_S),
        "VIDFORGE_MAX_ASSET_BYTES": str(MAX_ASSET_BYTES),
        "VIDFORGE_MAX_ASSET_BYTES_PER_PRINCIPAL": str(QUOTA_BYTES),
        "VIDFORGE_POLL_INTERVAL_MS": "500",
    }
    with ServerProcess(tmp_path_factory.mktemp("direct") / "data", env=env, tokens=TOKENS) as proc:
        yield proc


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def padded_clip(path: Path, size: int) -> bytes:
    """A real clip grown to `size` bytes with an MP4 `free` box after its boxes (players and demuxers skip it)."""
    clip = Path(make_clip(str(path), seconds=2.0, width=320, height=180, audio=True)).read_bytes()
    padding = size - len(clip)
    return clip + padding.to_bytes(4, "big") + b"free" + bytes(padding - 8)


def open_upload(server: ServerProcess, token: str, size: int, filename: str = "clip.mp4") -> httpx.Response:
    return httpx.post(
        f"{server.base}/assets/uploads",
        params={"size_bytes": size, "filename": filename},
        headers=bearer(token),
        timeout=60,
    )


def put_parts(opened: dict, data: bytes) -> None:
    """Each part to its presigned URL, as a client does: straight to the bucket, with no credential of the server."""
    step = opened["part_bytes"]
    for part in opened["parts"]:
        start = (part["part_number"] - 1) * step
        response = httpx.put(part["url"], content=data[start : start + step], timeout=120)
        assert response.status_code == 200 and response.headers.get("etag"), response.text


def complete(server: ServerProcess, token: str, opened: dict) -> httpx.Response:
    return httpx.post(opened["complete_url"], headers=bearer(token), timeout=120)


def sigv4_signature(url: str, secret: str, method: str = "GET") -> str:
    """The signature S3 expects on a presigned URL (AWS Signature Version 4, query parameters, unsigned payload),
    computed here from its parts: what S3 compares the URL's `X-Amz-Signature` with."""
    parts = urlsplit(url)
    params = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "X-Amz-Signature"]
    query = "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(params))
    fields = dict(params)
    canonical = "\n".join(
        [method, parts.path, query, f"host:{parts.netloc}\n", fields["X-Amz-SignedHeaders"], "UNSIGNED-PAYLOAD"]
    )
    scope = fields["X-Amz-Credential"].split("/", 1)[1]
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", fields["X-Amz-Date"], scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = ("AWS4" + secret).encode()
    for step in scope.split("/"):
        key = hmac.new(key, step.encode(), hashlib.sha256).digest()
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


def check_presigned(url: str, s3_server, asked_between: tuple[float, float]) -> dict[str, str]:
    """`url` is a presigned GET of the bucket's endpoint, signed with the bucket's secret, that works for
    URL_TTL_S from the moment it was asked for (`asked_between`: before and after the request, epoch seconds)."""
    assert url.startswith(s3_server.endpoint + "/"), url
    fields = dict(parse_qsl(urlsplit(url).query))
    assert fields["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256" and fields["X-Amz-SignedHeaders"] == "host"
    assert fields["X-Amz-Expires"] == str(URL_TTL_S)
    signed_at = datetime.strptime(fields["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).timestamp()
    assert asked_between[0] - 1 <= signed_at <= asked_between[1]
    secret = s3_server.env["AWS_SECRET_ACCESS_KEY"]
    assert fields["X-Amz-Signature"] == sigv4_signature(url, secret)
    # The expiry is signed: the same URL working longer would need another signature, which only the secret makes.
    longer = url.replace(f"X-Amz-Expires={URL_TTL_S}", f"X-Amz-Expires={URL_TTL_S * 1000}")
    assert sigv4_signature(longer, secret) != fields["X-Amz-Signature"]
    return fields


def redirected(target: str, s3_server, **request) -> tuple[httpx.Response, dict[str, str]]:
    """GET `target` without following: a 307 to a presigned URL of the bucket (checked); (answer, its fields)."""
    before = time.time()
    answer = httpx.get(target, follow_redirects=False, timeout=60, **request)
    assert answer.status_code == 307, (target, answer.status_code, answer.text)
    assert answer.headers["cache-control"] == "no-store"
    return answer, check_presigned(answer.headers["location"], s3_server, (before, time.time()))


def test_a_direct_upload_renders_and_its_downloads_come_from_the_bucket(server, s3_server, tmp_path):
    data = padded_clip(tmp_path / "clip.mp4", 9 * MIB)
    opened_at = time.time()
    response = open_upload(server, ALICE, len(data))
    assert response.status_code == 201, response.text
    opened = response.json()
    assert opened["part_bytes"] == PART_BYTES and [p["part_number"] for p in opened["parts"]] == [1, 2]
    assert all(p["url"].startswith(s3_server.endpoint + "/") for p in opened["parts"])
    expires = datetime.strptime(opened["expires_at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    assert expires >= opened_at - 1 + Config().direct_upload_ttl_s
    assert opened["complete_url"].startswith(f"{server.base}/assets/uploads/")
    assert s3_server.object_keys(f"{PREFIX}/assets/") == []  # nothing is an object until it is complete

    put_parts(opened, data)
    done = complete(server, ALICE, opened)
    assert done.status_code == 201, done.text
    asset = done.json()
    assert asset["kind"] == "video" and asset["size_bytes"] == len(data)
    asset_id = asset["uri"].removeprefix("vidforge://assets/")
    blob = f"{PREFIX}/assets/{asset_id}/blob"
    assert s3_server.object_keys(f"{PREFIX}/assets/{asset_id}/") == [blob, f"{PREFIX}/assets/{asset_id}/meta.json"]
    assert s3_server.get(blob) == data and s3_server.open_multipart_uploads() == []
    again = complete(server, ALICE, opened)  # a retried completion answers the asset it made
    assert again.status_code == 201 and again.json() == asset

    wire = Wire(server.url, token=ALICE, tasks=True)
    try:
        args = {"source_asset_uri": asset["uri"], "output_format": "mp4", "resolution": "720p"}
        streaming = {"ladder": ["360p"], "segment_s": 2}
        task_id = wire.tool("vidforge_render_video", {**args, "streaming": streaming})["taskId"]
        finished = poll_task(wire, task_id, lambda t: t["status"] in TERMINAL)
    finally:
        wire.close()
    assert finished["status"] == "completed" and finished["result"]["isError"] is False, finished
    video_key = f"{PREFIX}/artifacts/{task_id}/final.mp4"
    assert f"{PREFIX}/artifacts/{task_id}/poster.jpg" in s3_server.object_keys(f"{PREFIX}/artifacts/{task_id}/")
    video = s3_server.get(video_key)

    # GET /artifacts: a 307 to the object, which fetches the bytes (as a download), Range requests included.
    url = f"{server.base}/artifacts/{task_id}/final.mp4"
    answer, fields = redirected(url, s3_server, headers=bearer(ALICE))
    assert fields["response-content-disposition"] == 'attachment; filename="final.mp4"'
    location = answer.headers["location"]
    whole = httpx.get(location, timeout=60)
    assert whole.status_code == 200 and whole.content == video and whole.headers["content-type"] == "video/mp4"
    ranged = httpx.get(location, headers={"Range": "bytes=1000-1999"}, timeout=60)
    assert ranged.status_code == 206 and ranged.content == video[1000:2000]
    followed = httpx.get(url, headers={**bearer(ALICE), "Range": "bytes=-100"}, follow_redirects=True, timeout=60)
    assert followed.status_code == 206 and followed.content == video[-100:]  # a client that follows: the same
    assert httpx.head(url, headers=bearer(ALICE), timeout=60).status_code == 307
    assert httpx.get(url, headers=bearer(BOB), timeout=60).status_code == 404  # not bob's: no URL at all

    # The watch page: its video and download are 307s to the bucket, and its policy lets media come from there.
    link = json.loads(finished["result"]["content"][0]["text"])["watch_url"]
    page = httpx.get(link, timeout=60)
    assert (
        page.status_code == 200 and f"media-src 'self' {s3_server.endpoint}" in page.headers["content-security-policy"]
    )
    path, query = urlsplit(link).path, urlsplit(link).query
    played, fields = redirected(f"{server.base}{path}/video?{query}", s3_server)
    assert "response-content-disposition" not in fields and fields["response-content-type"] == "video/mp4"
    assert httpx.get(played.headers["location"], timeout=60).content == video
    _, fields = redirected(f"{server.base}{path}/download?{query}", s3_server)
    assert fields["response-content-disposition"] == 'attachment; filename="final.mp4"'
    poster = httpx.get(f"{server.base}{path}/poster.jpg?{query}", timeout=60)  # small: served by the server
    assert poster.status_code == 200 and poster.content == s3_server.get(f"{PREFIX}/artifacts/{task_id}/poster.jpg")

    # The stream's players' link: the playlists come from the server (a player resolves their relative URIs under
    # the signed folder it fetched them from), the segments are 307s to the bucket.
    hls_url = finished["result"]["_meta"][STREAM_META_KEY]["hls_url"]
    master = httpx.get(hls_url, timeout=60)
    assert master.status_code == 200 and master.text.startswith("#EXTM3U"), master.text
    media_url = urljoin(hls_url, m3u8.loads(master.text).playlists[0].uri)
    media = httpx.get(media_url, timeout=60)
    assert media.status_code == 200
    segment = m3u8.loads(media.text).segments[0].uri
    answer, fields = redirected(urljoin(media_url, segment), s3_server)
    assert fields["response-content-type"] == "video/iso.segment"
    stored = s3_server.get(f"{PREFIX}/artifacts/{task_id}/stream/{segment}")
    assert httpx.get(answer.headers["location"], timeout=60).content == stored


def test_refused_direct_uploads_leave_nothing_in_the_bucket(server, s3_server, tmp_path):
    def asset_objects(opened: dict) -> list[str]:
        ticket = Ticket.decoded(opened["upload_id"].partition(".")[0])
        assert ticket is not None
        return s3_server.object_keys(f"{PREFIX}/assets/{ticket.asset_id}/")

    # Not media: parsed once complete, refused, deleted; the upload is no longer open.
    text = ("Notes for the video, not the video.\n" * 60).encode()
    opened = open_upload(server, ALICE, len(text), "notes.mp4").json()
    put_parts(opened, text)
    refused = complete(server, ALICE, opened)
    assert refused.status_code == 415 and refused.json()["error"]["code"] == "unsupported_codec", refused.text
    assert asset_objects(opened) == [] and s3_server.open_multipart_uploads() == []
    gone = complete(server, ALICE, opened)
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "source_not_found"

    # More than declared, past the size limit: refused once complete, deleted.
    opened = open_upload(server, ALICE, 1000).json()
    put_parts({**opened, "part_bytes": MAX_ASSET_BYTES + 1}, bytes(MAX_ASSET_BYTES + 1))
    too_large = complete(server, ALICE, opened)
    assert too_large.status_code == 413 and too_large.json()["error"]["code"] == "asset_too_large"
    assert "VIDFORGE_MAX_ASSET_BYTES" in too_large.json()["error"]["details"]["reason"]
    assert asset_objects(opened) == [] and s3_server.open_multipart_uploads() == []

    # Declared past the limit or the quota: refused before anything is opened.
    over = open_upload(server, BOB, MAX_ASSET_BYTES + 1)
    assert over.status_code == 413 and over.json()["error"]["code"] == "asset_too_large"
    quota = open_upload(server, BOB, QUOTA_BYTES + 1)
    assert quota.status_code == 413 and quota.json()["error"]["code"] == "asset_quota_exceeded"
    for size in ("0", "-5", "many"):
        bad = httpx.post(f"{server.base}/assets/uploads", params={"size_bytes": size}, headers=bearer(BOB), timeout=60)
        assert bad.status_code == 400 and bad.json()["error"]["details"]["field"] == "size_bytes"
    assert s3_server.open_multipart_uploads() == []

    # Another principal's upload id completes nothing; one past its time is refused and aborted.
    data = padded_clip(tmp_path / "clip.mp4", 1 * MIB)
    opened = open_upload(server, ALICE, len(data)).json()
    put_parts(opened, data)
    foreign = complete(server, BOB, opened)
    assert foreign.status_code == 404 and foreign.json()["error"]["code"] == "source_not_found"
    assert asset_objects(opened) == [] and len(s3_server.open_multipart_uploads()) == 1
    key = (server.data_dir / KEY_FILE).read_text().strip()
    encoded = opened["upload_id"].partition(".")[0]
    past = ReviewCapability(f"alice\n{encoded}", TICKET_ROUND, int(time.time()) - 1)
    expired = f"{encoded}.{ReviewSigner(key, PURPOSE).token(past)}"
    late = httpx.post(f"{server.base}/assets/uploads/{expired}/complete", headers=bearer(ALICE), timeout=60)
    assert late.status_code == 410 and "VIDFORGE_DIRECT_UPLOAD_TTL_S" in late.json()["error"]["details"]["reason"]
    assert s3_server.open_multipart_uploads() == [] and asset_objects(opened) == []
