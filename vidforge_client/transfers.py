"""vidforge's plain-HTTP routes beside `/mcp`, as the client uses them: a health check that proves the server and
the credential before anything else, uploads (`POST /assets`, the file's raw bytes as the body, streamed), downloads
(`GET /artifacts/…`, streamed into a temporary file beside the output and renamed into place once complete, so an
interrupted download leaves nothing), and the caller's own listings (`GET /assets`, `GET /renders[/{render_id}]`).

Every refusal becomes a `ClientFailure` with one line that says why (the server's error envelope) and what to do.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Literal

import anyio
import httpx2

from mcp_protocol.answers import ErrorEnvelope, UploadedAsset
from vidforge_client.address import ServerAddress
from vidforge_client.failures import ClientFailure, ExitCode, credential_refused, read_as

CHUNK_BYTES = 1024 * 1024
VIDEO_URI_PREFIX = "vidforge://videos/"
# An upload's refusals that are about the file (too large, not a readable video or image, over a media limit).
REFUSED_FILE = (413, 415, 422)

Listed = Literal["assets", "renders", "webhooks"]


class ServerFiles:
    def __init__(self, http: httpx2.AsyncClient, address: ServerAddress) -> None:
        self.http = http
        self.address = address

    async def check(self) -> None:
        """`GET /healthz`, behind the same authentication as every other route: the server is up and takes the
        credential (ClientFailure otherwise)."""
        self._check(await self.http.get(f"{self.address.base_url}/healthz"), "the health check")

    async def upload(self, path: Path) -> UploadedAsset:
        """Store a local video or image as an asset of the caller."""
        size = path.stat().st_size
        response = await self.http.post(
            f"{self.address.base_url}/assets",
            params={"filename": path.name},
            content=_chunks(path),
            headers={"Content-Length": str(size)},
        )
        if response.status_code in REFUSED_FILE:
            refusal = ErrorEnvelope.in_body(_json(response))
            why = refusal.text() if refusal else f"HTTP {response.status_code}"
            raise ClientFailure(ExitCode.USAGE, f"the server refused {path}: {why}")
        what = f"the upload of {path}"
        return read_as(UploadedAsset, self._check(response, what), what)

    async def download(self, video_uri: str, out: Path) -> int:
        """Stream the finished video (`vidforge://videos/<render_id>/final.<ext>`) to `out`; returns its size."""
        url = f"{self.address.base_url}/artifacts/{video_uri.removeprefix(VIDEO_URI_PREFIX)}"
        partial = out.with_name(f".{out.name}.part")
        try:
            # A server with its media in a bucket answers with a redirect to the object (direct transfers); the
            # client drops the bearer token on the way there, the bucket's URL being its own credential.
            async with self.http.stream("GET", url, follow_redirects=True) as response:
                if response.status_code >= 400:
                    await response.aread()
                    self._check(response, f"the download of {video_uri}")
                async with await anyio.open_file(partial, "wb") as file:
                    async for chunk in response.aiter_bytes(CHUNK_BYTES):
                        await file.write(chunk)
            os.replace(partial, out)
        finally:
            partial.unlink(missing_ok=True)
        return out.stat().st_size

    async def listing(self, listed: Listed, limit: int | None = None, cursor: str | None = None) -> object:
        """A page of the caller's own assets, renders or webhook deliveries, newest first: the JSON the server
        answered (`{"items": [...], "next_cursor": ...}`, which mcp_protocol.answers.ListingPage reads)."""
        params = {name: value for name, value in (("limit", limit), ("cursor", cursor)) if value is not None}
        return self._check(await self.http.get(f"{self.address.base_url}/{listed}", params=params), f"GET /{listed}")

    async def render(self, render_id: str) -> object:
        """One of the caller's renders, as `GET /renders` lists it: the JSON the server answered (which
        mcp_protocol.answers.RenderItem reads)."""
        response = await self.http.get(f"{self.address.base_url}/renders/{render_id}")
        if response.status_code == 404:
            raise ClientFailure(
                ExitCode.USAGE, f"no render {render_id} for this token (`vidforge renders list` shows yours)"
            )
        return self._check(response, f"GET /renders/{render_id}")

    def _check(self, response: httpx2.Response, what: str) -> object:
        """The response's JSON body (None when it is not JSON); ClientFailure for a refusal."""
        status = response.status_code
        if status in (401, 403):
            raise credential_refused(self.address, status)
        if status >= 400:
            refusal = ErrorEnvelope.in_body(_json(response))
            why = refusal.text() if refusal else f"HTTP {status}"
            busy = (
                " (the server is busy or its storage is unavailable; try again shortly)" if status in (429, 503) else ""
            )
            raise ClientFailure(ExitCode.SERVER, f"{self.address.base_url} refused {what}: {why}{busy}")
        return _json(response)


def _json(response: httpx2.Response) -> object:
    try:
        body: object = response.json()
    except ValueError:
        return None
    return body


async def _chunks(path: Path) -> AsyncIterator[bytes]:
    async with await anyio.open_file(path, "rb") as file:
        while chunk := await file.read(CHUNK_BYTES):
            yield chunk
