"""A media store that does not answer (issue 20 item 4), against a real S3 server (moto) on loopback:

- at start-up, `vidforge serve` writes and deletes a key from a Ray worker process (what the ingress replicas and
  the render tasks will see, not only its own) and refuses to start, with one line naming what failed, when the bucket
  does not answer;
- while serving, a bucket that has gone is a temporary fault in the contract's envelope: HTTP 503 with
  `temporary: true` and Retry-After on the file routes (over MCP, a tool's fault already is the envelope's
  `internal_error`, temporary; a resource read of a store that does not answer is now the same). Before this, an
  upload was answered with Starlette's plain-text `500 Internal Server Error`;
- S3 answers a HEAD of any key in a bucket that has gone with a bare 404, as for a missing key: a render of an
  uploaded asset was `source_not_found` and `/readyz` said ready. Now both name the store.
"""

from __future__ import annotations

import contextlib

import httpx
import pytest

from tests.harness import ServerProcess, Wire, run_vidforge, upload
from tests.media import make_clip

pytestmark = pytest.mark.ray

PREFIX = "faults"


def test_serve_refuses_to_start_when_the_bucket_does_not_answer_a_worker(s3_server, tmp_path):
    env = {
        **s3_server.env,
        "VIDFORGE_DATA_DIR": str(tmp_path / "data"),
        "VIDFORGE_STORAGE_URL": f"s3://no-such-bucket-{tmp_path.name.lower().replace('_', '-')}/{PREFIX}",
        "PYTHONUNBUFFERED": "1",
    }
    started = run_vidforge("serve", "--port", "0", env=env, timeout=240)
    assert started.returncode == 2, started.stdout[-2000:] + started.stderr[-2000:]
    refusal = [line for line in started.stderr.splitlines() if line.startswith("vidforge: ")]
    assert len(refusal) == 1, started.stderr[-2000:]
    assert "the media store (bucket s3://no-such-bucket-" in refusal[0] and "a Ray worker" in refusal[0]
    assert "vidforge MCP endpoint" not in started.stdout


@pytest.fixture(scope="module")
def server(s3_server, tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    env = {**s3_server.env, "VIDFORGE_STORAGE_URL": f"s3://{s3_server.bucket}/{PREFIX}"}
    process = ServerProcess(root / "data", env=env)
    try:
        yield process.start()
    finally:
        process.kill()


@contextlib.contextmanager
def bucket_gone(s3_server):
    """The bucket deleted (its objects first: S3 deletes only an empty bucket), then made again, empty."""
    client = s3_server.client()
    for key in s3_server.object_keys(""):
        client.delete_object(Bucket=s3_server.bucket, Key=key)
    client.delete_bucket(Bucket=s3_server.bucket)
    try:
        yield
    finally:
        client.create_bucket(Bucket=s3_server.bucket)


def test_a_bucket_gone_while_serving_is_a_temporary_fault_in_the_envelope(server, s3_server, tmp_path):
    clip = make_clip(str(tmp_path / "clip.mp4"), seconds=1.0)
    with bucket_gone(s3_server):
        with open(clip, "rb") as body:
            response = httpx.post(f"{server.base}/assets", params={"filename": "clip.mp4"}, content=body, timeout=120)
        assert response.status_code == 503, (response.status_code, response.headers, response.text[:500])
        assert response.headers["content-type"].startswith("application/json")
        assert int(response.headers["retry-after"]) > 0
        error = response.json()["error"]
        assert error["temporary"] is True and error["code"] == "internal_error" and error["request_id"]
        assert "media storage" in error["message"]


def test_a_bucket_gone_is_not_a_missing_asset_and_the_server_is_not_ready(server, s3_server, tmp_path):
    uploaded = upload(server, make_clip(str(tmp_path / "clip.mp4"), seconds=1.0))
    assert httpx.get(f"{server.base}/readyz", timeout=30).status_code == 200
    arguments = {"source_asset_uri": uploaded, "output_format": "mp4", "resolution": "720p"}
    with bucket_gone(s3_server):
        readiness = httpx.get(f"{server.base}/readyz", timeout=30)
        result = Wire(server.url).tool("vidforge_render_video", arguments)
    assert (readiness.status_code, readiness.json()) == (
        503,
        {"status": "unready", "failing": ["media_store"], "state": "available"},
    )
    assert result["isError"] is True, result
    envelope = result["structuredContent"]
    assert envelope["temporary"] is True and envelope["code"] != "source_not_found", envelope


def test_a_store_that_stops_answering_is_a_temporary_fault_on_the_mcp_surface(server, s3_server, tmp_path):
    """The MCP side of a storage outage (the S3 server stopped: connections refused): a render of an uploaded asset
    is the contract's envelope, temporary, not `source_not_found` (the asset is there) nor a transport failure.
    The module's last test: the S3 server comes back empty."""
    uploaded = upload(server, make_clip(str(tmp_path / "clip.mp4"), seconds=1.0))
    s3_server.stop()
    try:
        arguments = {"source_asset_uri": uploaded, "output_format": "mp4", "resolution": "720p"}
        result = Wire(server.url).tool("vidforge_render_video", arguments)
    finally:
        s3_server.start()
    assert result["isError"] is True, result
    envelope = result["structuredContent"]
    assert envelope["temporary"] is True and envelope["code"] != "source_not_found", envelope
