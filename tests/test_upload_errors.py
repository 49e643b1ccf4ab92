"""An upload that is not a video or image says what it is (issue 33 item 3): text, a PDF, bytes of no known format,
or a multipart form where the file's raw bytes belong, with the way to send them (`curl --data-binary`). An image
under a video's name is what it is: an image. Through `POST /assets` (contract error `unsupported_codec`, 415) and
`vidforge assets add`; `sniff` itself in the fast lane, the rest in the slow one."""

from __future__ import annotations

import os

import httpx
import pytest

from serve_app.media.content_sniff import sniff
from tests.harness import run_vidforge
from tests.media import make_clip, make_watermark_png

TEXT = b"Meeting notes\nbring the clip for Friday\n" * 10
PDF = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<< /Type /Catalog >>\nendobj\n" + bytes(range(256)) * 4
UNKNOWN = bytes(range(7, 256)) * 40  # no magic number, not text
RAW_BYTES = "send the file's raw bytes as the request body (`curl --data-binary @clip.mp4 …`)"


def multipart_body(path: str) -> tuple[bytes, str]:
    """The body and Content-Type that `curl -F file=@PATH` sends."""
    with open(path, "rb") as fh:
        request = httpx.Request("POST", "http://x/assets", files={"file": (os.path.basename(path), fh, "video/mp4")})
        return request.read(), request.headers["content-type"]


@pytest.mark.parametrize(
    "head, description, media",
    [
        (TEXT, "text", False),
        ("Grüße, 東京\n".encode(), "text", False),
        (PDF, "PDF data (application/pdf)", False),
        (b"PK\x03\x04" + bytes(200), "ZIP data (application/zip)", False),
        (b'--XyZ\r\nContent-Disposition: form-data; name="file"; filename="a.mp4"\r\n\r\n\x00\x01', None, False),
        (b"\x00\x00\x00\x18ftypmp42" + bytes(100), "MP4 data (video/mp4)", True),
        (UNKNOWN, None, True),
    ],
)
def test_sniff_tells_what_a_head_is(head, description, media):
    sniffed = sniff(head)
    assert sniffed.media is media
    if description is not None:
        assert sniffed.description == description
    if not media:
        assert sniffed.refusal().startswith("not a video or image: the file is ")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("uploads")
    (folder / "notes.mp4").write_bytes(TEXT)
    (folder / "report.mp4").write_bytes(PDF)
    (folder / "noise.mp4").write_bytes(UNKNOWN)
    make_watermark_png(str(folder / "still.mp4"))  # a PNG under a video's name
    form, _ = multipart_body(make_clip(str(folder / "clip.mp4"), seconds=1.0))
    (folder / "form.mp4").write_bytes(form)  # a form saved to a file, as `curl -F … --trace` would
    return folder


REFUSED = {
    "notes.mp4": "not a video or image: the file is text",
    "report.mp4": "not a video or image: the file is PDF data (application/pdf)",
    "noise.mp4": "no video or image format recognised in the file's first bytes; file is truncated or corrupt",
    "form.mp4": f"not a video or image: the file is a multipart/form-data form (what `curl -F` sends); {RAW_BYTES}",
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_assets_add_says_what_a_non_media_file_is(files, name, tmp_path):
    run = run_vidforge("assets", "add", str(files / name), "--data-dir", str(tmp_path / "data"), timeout=120)
    assert run.returncode == 2
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith(f"vidforge: rejected {files / name}: {REFUSED[name]}"), line


@pytest.mark.slow
def test_assets_add_takes_an_image_under_a_video_name_as_the_image_it_is(files, tmp_path):
    run = run_vidforge("assets", "add", str(files / "still.mp4"), "--data-dir", str(tmp_path / "data"), timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("image ")


def post_asset(server, content: bytes, filename: str, content_type: str = "application/octet-stream"):
    return httpx.post(
        f"{server.base}/assets",
        params={"filename": filename},
        content=content,
        headers={"Content-Type": content_type},
        timeout=120,
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_post_assets_says_what_a_non_media_body_is(open_server, files, name):
    response = post_asset(open_server, (files / name).read_bytes(), name)
    assert response.status_code == 415, response.text
    error = response.json()["error"]
    assert error["code"] == "unsupported_codec" and error["temporary"] is False
    assert error["details"]["field"] == "body"
    assert error["details"]["reason"].startswith(REFUSED[name]), error


@pytest.mark.slow
def test_post_assets_refuses_a_multipart_form_saying_to_send_the_raw_bytes(open_server, files):
    body, content_type = multipart_body(str(files / "clip.mp4"))
    response = post_asset(open_server, body, "clip.mp4", content_type)
    assert response.status_code == 415, response.text
    error = response.json()["error"]
    assert error["code"] == "unsupported_codec" and error["details"]["field"] == "body"
    assert error["details"]["reason"] == REFUSED["form.mp4"]


@pytest.mark.slow
def test_post_assets_takes_an_image_under_a_video_name_as_the_image_it_is(open_server, files):
    response = post_asset(open_server, (files / "still.mp4").read_bytes(), "still.mp4")
    assert response.status_code == 201, response.text
    assert response.json()["kind"] == "image"
