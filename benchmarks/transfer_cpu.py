"""The ingress replica's CPU per GiB moved, with the media in a bucket: bytes through the replica, then presigned.

Starts moto's S3 server (tests/s3_server.py, the suite's real S3 REST server) and, in turn, two `vidforge serve`s with
their media in it (VIDFORGE_STORAGE_URL):

- before: VIDFORGE_DIRECT_TRANSFERS=off, so every byte passes through the ingress replica, as with media on the data
  dir: uploads are `POST /assets` (streamed into the bucket by the replica), downloads `GET /artifacts/…` (streamed
  out of it by the replica);
- after: direct transfers on (the default): uploads open a presigned multipart upload (`POST /assets/uploads`), PUT
  their parts to the bucket and complete it (`…/complete`: the replica assembles, checks and has the file parsed);
  downloads get a 307 from `GET /artifacts/…` and fetch the presigned URL from the bucket.

Each side uploads `--gib` GiB of video (files of `--file-mib` MiB: a real clip grown with an MP4 `free` box, which
the upload's parse skips as players do) and downloads `--gib` GiB (one rendered 1080p video of `--video-seconds`,
fetched again and again). The
CPU seconds of the server's ingress replica are sampled from /proc over each phase (benchmarks/serving.py's
ProcessSampler), less what the idle replica spends over as long (sampled for IDLE_S first: its heartbeats and the
registry's change feed); the parse of an upload runs in the media parser's process, on both sides alike, and is not
counted. Prints, per phase and side, CPU-seconds per GiB and milliseconds per request (a presigned transfer costs
the replica per request, not per byte: the larger the files, the less per GiB), and how many times less the
presigned side costs per GiB.

    .venv/bin/python benchmarks/transfer_cpu.py
    .venv/bin/python benchmarks/transfer_cpu.py --gib 0.25 --file-mib 32   # a quick look
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serving import BenchServer, ProcessSampler, RenderTrace, drive_render  # noqa: E402 - first (Ray auth mode)

# isort: split

import httpx  # noqa: E402
from media import make_clip  # noqa: E402 - tests/ is on the path (serving)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tests.s3_server import S3Server  # noqa: E402 - the suite's S3 server, which imports tests.harness

INGRESS = "ingress (Serve replica)"  # the replica's kind in serving.KINDS
GIB = 1024**3
MIB = 1024**2
CHUNK_BYTES = MIB
PREFIX = "bench"
IDLE_S = 10.0  # how long the replica's idle CPU is sampled, to tell the transfers' own CPU from its background


def grown_clip(path: Path, size: int) -> Path:
    """A real clip grown to `size` bytes with an MP4 `free` box (skipped by demuxers) after its own boxes."""
    clip = Path(make_clip(str(path), seconds=2.0, width=320, height=180, audio=True)).read_bytes()
    padding = size - len(clip)
    with open(path, "wb") as out:
        out.write(clip + padding.to_bytes(4, "big") + b"free")
        for start in range(0, padding - 8, CHUNK_BYTES):
            out.write(bytes(min(CHUNK_BYTES, padding - 8 - start)))
    return path


def chunks(path: Path, start: int = 0, end: int | None = None) -> Iterator[bytes]:
    with open(path, "rb") as file:
        file.seek(start)
        left = (end if end is not None else path.stat().st_size) - start
        while left > 0 and (chunk := file.read(min(CHUNK_BYTES, left))):
            left -= len(chunk)
            yield chunk


def upload_through(server: BenchServer, http: httpx.Client, path: Path) -> None:
    response = http.post(
        f"{server.proc.base}/assets",
        params={"filename": path.name},
        content=chunks(path),
        headers={"Content-Length": str(path.stat().st_size)},
    )
    response.raise_for_status()


def upload_direct(server: BenchServer, http: httpx.Client, path: Path) -> None:
    size = path.stat().st_size
    opened = http.post(f"{server.proc.base}/assets/uploads", params={"size_bytes": size, "filename": path.name})
    opened.raise_for_status()
    body = opened.json()
    step = body["part_bytes"]
    with httpx.Client(timeout=600) as bucket:  # no credential of the server goes to the bucket
        for part in body["parts"]:
            start = (part["part_number"] - 1) * step
            end = min(start + step, size)
            sent = bucket.put(
                part["url"], content=chunks(path, start, end), headers={"Content-Length": str(end - start)}
            )
            sent.raise_for_status()
    http.post(body["complete_url"]).raise_for_status()


def download(http: httpx.Client, url: str) -> int:
    """GET `url` (following a redirect to the bucket, without the server's credential) and count the bytes."""
    received = 0
    with http.stream("GET", url, follow_redirects=True) as response:
        response.raise_for_status()
        for chunk in response.iter_bytes(CHUNK_BYTES):
            received += len(chunk)
    return received


@dataclass(frozen=True)
class Phase:
    """One phase on one side: the ingress replica's CPU over it, less what it spends idle over as long."""

    cpu_s: float  # the replica's CPU seconds over the phase
    idle_s: float  # what the idle replica spends over the same wall time (its heartbeats, the record feed)
    wall_s: float
    moved: int  # bytes
    requests: int  # uploads or downloads

    @property
    def net_s(self) -> float:
        return max(0.0, self.cpu_s - self.idle_s)

    def line(self, name: str, each: int) -> str:
        return (
            f"  {name:8s} {self.moved / GIB:5.2f} GiB in {self.requests} x {each / MIB:.1f} MiB, {self.wall_s:5.1f} s: "
            f"replica {self.cpu_s:5.2f} CPU-s, idle {self.idle_s:4.2f} -> {self.net_s / (self.moved / GIB):6.2f} "
            f"CPU-s/GiB, {self.net_s / self.requests * 1000:6.1f} ms/request"
        )


def replica_cpu(sampler: ProcessSampler, work) -> tuple[float, float, object]:
    """(the ingress replica's CPU seconds, wall seconds, `work()`'s value) over `work()`."""
    sampler.mark()
    started = time.perf_counter()
    value = work()
    wall = time.perf_counter() - started
    sampler._sample()  # the last interval's CPU, too
    return sampler.cpu_by_kind.get(INGRESS, 0.0), wall, value


def measure(sampler: ProcessSampler, idle_rate: float, requests: int, work) -> Phase:
    """`work()` `requests` times (each returns the bytes it moved) as a Phase."""
    cpu, wall, moved = replica_cpu(sampler, lambda: sum(work() for _ in range(requests)))
    assert isinstance(moved, int)
    return Phase(cpu, idle_rate * wall, wall, moved, requests)


def run_side(name: str, direct: bool, s3: S3Server, workdir: Path, upload_file: Path, source: str, gib: float):
    env = {
        **s3.env,
        "VIDFORGE_STORAGE_URL": f"s3://{s3.bucket}/{PREFIX}-{'direct' if direct else 'through'}",
        "VIDFORGE_DIRECT_TRANSFERS": "on" if direct else "off",
        "VIDFORGE_MAX_ASSET_BYTES_PER_PRINCIPAL": str(int(gib * GIB) + 8 * GIB),
    }
    target = int(gib * GIB)
    with BenchServer(str(workdir / name.replace(" ", "-")), env=env) as server:
        headers = {"Authorization": f"Bearer {server.token(0)}"}
        args = {"source_asset_uri": server.upload(str(source)), "output_format": "mp4", "resolution": "1080p"}
        task_id = drive_render(server, RenderTrace(principal=0, watermark=False), args).task_id
        video_url = f"{server.proc.base}/artifacts/{task_id}/final.mp4"
        with httpx.Client(headers=headers, timeout=600) as http, ProcessSampler(os.getsid(server.pid)) as sampler:
            video_bytes = download(http, video_url)  # warm-up, and the file's size
            idle_cpu, idle_wall, _ = replica_cpu(sampler, lambda: time.sleep(IDLE_S))
            idle_rate = idle_cpu / idle_wall
            upload = upload_direct if direct else upload_through
            file_bytes = upload_file.stat().st_size

            def uploaded() -> int:
                upload(server, http, upload_file)
                return file_bytes

            up = measure(sampler, idle_rate, max(1, round(target / file_bytes)), uploaded)
            down = measure(sampler, idle_rate, max(1, round(target / video_bytes)), lambda: download(http, video_url))
    print(f"{name} (the idle replica: {idle_rate * 1000:.1f} ms CPU per second)")
    print(up.line("upload", file_bytes))
    print(down.line("download", video_bytes))
    return {"upload": up.net_s / (up.moved / GIB), "download": down.net_s / (down.moved / GIB)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gib", type=float, default=1.0, help="GiB to upload, and GiB to download, per side")
    parser.add_argument("--file-mib", type=int, default=64, help="size of each uploaded file")
    parser.add_argument(
        "--video-seconds", type=float, default=60.0, help="length of the 1080p video rendered for the downloads"
    )
    parser.add_argument(
        "--workdir", help="where the servers, the bucket's server and the files live (default: a temp dir)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vf-transfer-") as scratch:
        workdir = Path(args.workdir or scratch)
        workdir.mkdir(parents=True, exist_ok=True)
        upload_file = grown_clip(workdir / "upload.mp4", args.file_mib * MIB)
        source = make_clip(str(workdir / "source.mp4"), seconds=args.video_seconds, width=1920, height=1080, audio=True)
        s3 = S3Server(workdir).start()
        try:
            before = run_side("before: bytes through the replica", False, s3, workdir, upload_file, source, args.gib)
            after = run_side(
                "after: presigned, straight to the bucket", True, s3, workdir, upload_file, source, args.gib
            )
        finally:
            s3.stop()
    print("ingress replica CPU-s per GiB, before -> after:")
    for phase in ("upload", "download"):
        ratio = before[phase] / after[phase] if after[phase] > 0 else float("inf")
        print(f"  {phase:8s} {before[phase]:6.2f} -> {after[phase]:6.2f}  ({ratio:.1f}x less)")


if __name__ == "__main__":
    main()
