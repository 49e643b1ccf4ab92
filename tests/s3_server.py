"""A real S3-compatible server for the tests: moto's standalone server (`moto_server`), on loopback.

It speaks the S3 REST API (SigV4, multipart uploads, ranged GETs, bulk deletes), so the S3 backend is
tested through the same client code and HTTP requests it makes against a real bucket. Its request recorder
writes every request (headers included) to a file, which lets a test see the Range headers the readers sent
and the multipart upload calls the writers made.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import boto3
import httpx

from tests.harness import free_port, wait_until

WHITESPACE = re.compile(r"\s*")

REGION = "us-east-1"
START_TIMEOUT_S = 60


class S3Server:
    """`moto_server` on a free loopback port, one bucket in it; `env` points AWS clients at it."""

    def __init__(self, workdir: Path, bucket: str = "vidforge-media") -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.bucket = bucket
        self.recording = workdir / "moto-requests.jsonl"
        self.log_path = workdir / "moto.log"
        self.env = {
            "AWS_ACCESS_KEY_ID": "vidforge-test",
            "AWS_SECRET_ACCESS_KEY": "vidforge-test-secret",
            "AWS_REGION": REGION,
            "AWS_ENDPOINT_URL": self.endpoint,
        }
        self.proc: subprocess.Popen | None = None

    def start(self) -> S3Server:
        moto = Path(sys.executable).with_name("moto_server")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [str(moto), "-H", "127.0.0.1", "-p", str(self.port)],
                env={**os.environ, "MOTO_RECORDER_FILEPATH": str(self.recording)},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"moto_server exited:\n{self.log_path.read_text()[-2000:]}")
            try:
                return httpx.get(f"{self.endpoint}/moto-api/", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ready, START_TIMEOUT_S, interval=0.2, message="moto_server to come up")
        self.client().create_bucket(Bucket=self.bucket)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)

    def client(self):
        """boto3 against the server: the tests' own view of the bucket, independent of the code under test."""
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=self.env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=self.env["AWS_SECRET_ACCESS_KEY"],
        )

    def object_keys(self, prefix: str = "") -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return sorted(item["Key"] for page in pages for item in page.get("Contents", []))

    def get(self, key: str) -> bytes:
        return self.client().get_object(Bucket=self.bucket, Key=key)["Body"].read()

    def put(self, key: str, data: bytes) -> None:
        self.client().put_object(Bucket=self.bucket, Key=key, Body=data)

    def open_multipart_uploads(self) -> list[str]:
        return [u["Key"] for u in self.client().list_multipart_uploads(Bucket=self.bucket).get("Uploads", [])]

    def record(self, on: bool) -> None:
        """Start (after clearing) or stop recording requests."""
        if on:
            httpx.post(f"{self.endpoint}/moto-api/recorder/reset-recording").raise_for_status()
        httpx.post(f"{self.endpoint}/moto-api/recorder/{'start' if on else 'stop'}-recording").raise_for_status()

    def recorded(self) -> list[dict]:
        """The requests recorded: method, url, headers, and the body's size."""
        if not self.recording.exists():
            return []
        requests = []
        for entry in json_values(self.recording.read_text()):
            body = entry.get("body") or ""
            size = len(base64.b64decode(body)) if entry.get("body_encoded") else len(body)
            requests.append(
                {
                    "method": entry["method"],
                    "url": entry["url"],
                    "headers": {k.lower(): v for k, v in entry["headers"].items()},
                    "body_bytes": size,
                }
            )
        return requests


def json_values(text: str) -> Iterator[dict]:
    """The JSON values in `text`, one after another. Moto's recorder writes each entry and its newline in two
    writes, from the server's request threads: with parallel part uploads two entries can share a line."""
    decoder, at = json.JSONDecoder(), WHITESPACE.match(text).end()
    while at < len(text):
        value, at = decoder.raw_decode(text, at)
        at = WHITESPACE.match(text, at).end()
        yield value
