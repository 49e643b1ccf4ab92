"""Chaos and soak: concurrent renders from three principals while processes are killed (issue 8 item 8).

Starts `vidforge serve` (real Ray + Serve) on loopback with three principals and submits N renders through
MCP over HTTP: mixed formats, some with a watermark that is approved through `tasks/update`, some cancelled
mid-way. Meanwhile it SIGKILLs, in rounds: random segment-worker processes (`ray::encode_segment_parts`), the
RenderSupervisor actor, the TaskRegistry actor, and once the whole server (every process of its session,
not a graceful stop), which is then started again on the same data dir. Afterwards it checks that

- every task is terminal (lost tasks = 0);
- every completed output has the source's exact frame count and PSNR-Y >= 40 dB (worst frame) against a
  single-segment reference rendered here with the same kernels;
- no file is orphaned: no staging leftovers, no artifact folder of a task that did not complete;
- every quota is back to zero: each principal can again start its full quota of renders.

It prints a table and exits non-zero when a check fails. `--short` is the CI mode (tests/test_chaos.py).

    .venv/bin/python benchmarks/chaos.py                # 18 renders, 3 kill rounds
    .venv/bin/python benchmarks/chaos.py --short        # 6 renders, 1 kill round
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from render_kernels.audio import encode_audio
from render_kernels.mux import mux_segments
from render_kernels.plan import plan_segments
from render_kernels.probe import probe
from render_kernels.spec import RenderSpec, WatermarkSpec
from render_kernels.video import encode_segment
from tests.harness import TERMINAL, ServerProcess, Wire, upload  # noqa: E402
from tests.media import decode_all, make_clip, make_watermark_png, psnr_y  # noqa: E402

PRINCIPALS = {"tok-ann": "ann", "tok-ben": "ben", "tok-cat": "cat"}
FORMATS = ("mp4", "webm", "mov")
WATERMARK = {"position": "bottom_right", "opacity": 0.6}
MIN_PSNR_DB = 40.0
SEGMENT_WORKER = b"ray::encode_segment_parts"
SUPERVISOR = b"ray::RenderSupervisor"
REGISTRY = b"ray::TaskRegistry"


@dataclass
class Render:
    principal_token: str
    clip: str
    output_format: str
    watermark: bool
    cancel: bool
    task_id: str = ""
    status: str = "submitted"
    cancel_sent: bool = False
    is_error: bool = False  # completed with a tool error (e.g. render_failed after repeated interruptions)
    approvals: int = 0
    problems: list[str] = field(default_factory=list)

    def arguments(self, assets: dict[tuple[str, str], str]) -> dict:
        args = {
            "source_asset_uri": assets[(self.principal_token, self.clip)],
            "output_format": self.output_format,
            "resolution": "720p",
        }
        if self.watermark:
            args["watermark"] = {"image_asset_uri": assets[(self.principal_token, "logo")], **WATERMARK}
        return args


def session_processes(server: ServerProcess, marker: bytes | None) -> list[int]:
    """PIDs in the server's session (it runs under its own session id) whose command line holds `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getsid(int(entry.name)) != server.proc.pid:
                continue
            if marker is None or marker in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except (OSError, ProcessLookupError):
            continue
    return found


def kill(pids: list[int]) -> int:
    killed = 0
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except ProcessLookupError:
            pass
    return killed


class Chaos:
    """Kills processes of the server on a schedule; `server_down` is set while the whole server restarts, and
    `restarts` counts the restarts begun (a request sent before one began may be answered by the dying server)."""

    def __init__(self, server: ServerProcess, plan: list[str], interval_s: float, rng: random.Random) -> None:
        self.server, self.plan, self.interval_s, self.rng = server, plan, interval_s, rng
        self.kills: Counter[str] = Counter()
        self.server_down = threading.Event()
        self.restarts = 0
        self.done = threading.Event()
        self.finished = threading.Event()  # every planned kill has been carried out

    def run(self) -> None:
        try:
            self._run_plan()
        finally:
            self.finished.set()

    def _run_plan(self) -> None:
        for kind in self.plan:
            if self.done.wait(self.interval_s):
                return
            if kind == "segment-worker":
                # Only a worker that is encoding right now: wait (bounded) for one to exist.
                deadline = time.monotonic() + 60
                while not (workers := session_processes(self.server, SEGMENT_WORKER)):
                    if time.monotonic() > deadline or self.done.wait(0.2):
                        break
                self.kills[kind] += kill(self.rng.sample(workers, 1)) if workers else 0
            elif kind == "supervisor":
                self.kills[kind] += kill(session_processes(self.server, SUPERVISOR))
            elif kind == "registry":
                self.kills[kind] += kill(session_processes(self.server, REGISTRY))
            elif kind == "whole-server":
                self.restarts += 1
                self.server_down.set()
                kill(session_processes(self.server, None))
                self.server.proc.wait(timeout=60)
                deadline = time.monotonic() + 60
                while session_processes(self.server, None) and time.monotonic() < deadline:
                    time.sleep(0.2)
                self.kills[kind] += 1
                self.server.start()
                self.server_down.clear()


def drive(renders: list[Render], wires: dict[str, Wire], chaos: Chaos, deadline_s: float, refused: Counter) -> None:
    """Poll every task; approve watermarks through tasks/update; cancel the chosen ones once they render.
    Requests that fail while processes are down are counted in `refused` and asked again.

    Polling goes on until every planned kill has happened, re-reading finished tasks too: a kill that lands
    after the last render ended must still leave every terminal task readable and unchanged."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        pending = [r for r in renders if r.status not in TERMINAL]
        if not pending and chaos.finished.is_set():
            if all(reread(r, wires, refused) for r in renders):
                return
        for render in pending or renders:
            if chaos.server_down.is_set():
                break
            wire = wires[render.principal_token]
            restarts = chaos.restarts
            try:
                body = wire.task("tasks/get", render.task_id)
                if "error" in body and (chaos.server_down.is_set() or chaos.restarts != restarts):
                    # Sent as the whole server was being killed: its last answer (Ray gone), asked again.
                    refused["while processes were killed"] += 1
                    continue
                if "error" in body:
                    render.problems.append(f"tasks/get error {body['error']}")
                    continue
                task = body["result"]
                render.status = task["status"]
                render.is_error = bool((task.get("result") or {}).get("isError"))
                if task["status"] == "input_required" and task.get("inputRequests"):
                    answers = {
                        key: {"action": "accept", "content": {"approved": True}} for key in task["inputRequests"]
                    }
                    wire.task("tasks/update", render.task_id, inputResponses=answers)
                    render.approvals += 1
                elif (
                    render.cancel
                    and not render.cancel_sent
                    and task["status"] == "working"
                    and "(frame " in (task.get("statusMessage") or "")
                ):
                    wire.task("tasks/cancel", render.task_id)
                    render.cancel_sent = True
            except Exception:  # noqa: BLE001 — the server is being killed or restarted: ask again next round
                refused["while processes were killed"] += 1
        time.sleep(0.5)


def reread(render: Render, wires: dict[str, Wire], refused: Counter) -> bool:
    """One more tasks/get of a finished render after the last kill; a changed status is recorded as a problem."""
    try:
        body = wires[render.principal_token].task("tasks/get", render.task_id)
    except Exception:  # noqa: BLE001 — the server is still restarting: ask again next round
        refused["while processes were killed"] += 1
        return False
    status = body.get("result", {}).get("status")
    if status != render.status:
        render.problems.append(f"after the last kill tasks/get says {status or body.get('error')}, was {render.status}")
    return True


def reference(clip: str, render: Render, logo: str, out_path: str) -> str:
    """The same job as one segment, serially, with the render kernels."""
    watermark = WatermarkSpec(logo, **WATERMARK) if render.watermark else None
    spec = RenderSpec(render.output_format, "720p", watermark)
    info = probe(clip)
    segments = [encode_segment(clip, s, spec, info) for s in plan_segments(info, 1)]
    mux_segments(segments, encode_audio(clip, spec.output_format), spec.output_format, out_path, info.fps)
    return out_path


def check_output(server: ServerProcess, render: Render, clips: dict[str, str], logo: str, work: Path) -> None:
    ext = render.output_format
    response = httpx.get(
        f"{server.base}/artifacts/{render.task_id}/final.{ext}",
        headers={"Authorization": f"Bearer {render.principal_token}"},
        timeout=120,
    )
    if response.status_code != 200:
        render.problems.append(f"download answered {response.status_code}")
        return
    got = work / f"{render.task_id}.{ext}"
    got.write_bytes(response.content)
    want = reference(clips[render.clip], render, logo, str(work / f"{render.task_id}-reference.{ext}"))
    output, single = decode_all(str(got)), decode_all(want)
    source_frames = decode_all(clips[render.clip], keep="none").frame_count
    if output.frame_count != source_frames:
        render.problems.append(f"{output.frame_count} frames, source has {source_frames}")
        return
    worst = min(psnr_y(a, b) for a, b in zip(output.frames, single.frames))
    if worst < MIN_PSNR_DB:
        render.problems.append(f"worst-frame PSNR-Y {worst:.1f} dB against the single-segment reference")


def orphans(server: ServerProcess, renders: list[Render]) -> list[str]:
    """Files no finished task accounts for: staging leftovers and artifact folders of tasks without a video."""
    completed = {r.task_id for r in renders if r.status == "completed" and not r.is_error}
    found = []
    for path in (server.data_dir / "assets").iterdir():
        if path.name.startswith(".") or not (path / "meta.json").exists():
            found.append(str(path))
    artifacts = server.data_dir / "artifacts"
    for folder in artifacts.iterdir() if artifacts.exists() else []:
        if folder.name not in completed:
            found.append(str(folder))
            continue
        found += [str(p) for p in folder.iterdir() if p.name.startswith(".")]
    return found


def quotas_are_free(server: ServerProcess, assets: dict, limit: int) -> list[str]:
    """Each principal starts `limit` renders at once (the whole quota), then cancels them."""
    problems = []
    for token in PRINCIPALS:
        wire = Wire(server.url, token=token, tasks=True)
        started = []
        for _ in range(limit):
            args = {"source_asset_uri": assets[(token, "short")], "output_format": "mp4", "resolution": "720p"}
            result = wire.tool("vidforge_render_video", args)
            if result.get("resultType") != "task":
                problems.append(f"{PRINCIPALS[token]}: {result.get('structuredContent', {}).get('code')}")
                break
            started.append(result["taskId"])
        for task_id in started:
            wire.task("tasks/cancel", task_id)
        wire.close()
    return problems


@dataclass
class ChaosReport:
    """What a chaos run did and found; `rows` is the printed table, `failures` every broken invariant."""

    renders: list[Render]
    kills: Counter[str]
    refused: int
    orphans: list[str]
    quota_problems: list[str]
    wall_s: float

    @property
    def lost(self) -> list[Render]:
        return [r for r in self.renders if r.status not in TERMINAL]

    @property
    def failures(self) -> list[str]:
        inexact = [f"{r.task_id} ({r.output_format}): {p}" for r in self.renders for p in r.problems]
        return inexact + self.orphans + self.quota_problems + [f"lost: {r.task_id} {r.status}" for r in self.lost]

    def rows(self) -> list[tuple[str, str]]:
        outcomes = Counter(r.status for r in self.renders)
        return [
            ("renders", str(len(self.renders))),
            *[(f"kills: {kind}", str(self.kills[kind])) for kind in KILL_KINDS],
            ("outcome: completed, video", str(sum(r.status == "completed" and not r.is_error for r in self.renders))),
            ("outcome: completed, error", str(sum(r.status == "completed" and r.is_error for r in self.renders))),
            ("outcome: cancelled", str(outcomes["cancelled"])),
            ("outcome: failed", str(outcomes["failed"])),
            ("polls refused during kills", str(self.refused)),
            ("watermarks approved", str(sum(r.approvals > 0 for r in self.renders))),
            ("cancels sent", str(sum(r.cancel_sent for r in self.renders))),
            ("lost tasks", f"{len(self.lost)} (target 0)"),
            (
                "outputs not exact",
                f"{sum(bool(r.problems) for r in self.renders)} (target 0; frame count, "
                f"PSNR-Y >= {MIN_PSNR_DB:.0f} dB)",
            ),
            ("orphaned files", f"{len(self.orphans)} (target 0)"),
            ("quotas not back to zero", f"{len(self.quota_problems)} (target 0)"),
            ("wall time", f"{self.wall_s:.0f} s"),
        ]


KILL_KINDS = ("segment-worker", "supervisor", "registry", "whole-server")


def run_chaos(short: bool, count: int | None = None, seed: int = 20261203) -> ChaosReport:
    rng = random.Random(seed)
    count = count or (6 if short else 18)
    rounds = 1 if short else 3
    plan = ["segment-worker", "supervisor", "segment-worker", "registry"] * rounds
    plan.insert(len(plan) // 2 + 1, "whole-server")
    quota = count  # every render may run at once: the quota check afterwards fills it again
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="vidforge-chaos-") as tmp:
        work = Path(tmp)
        seconds = (3.0, 5.0) if short else (8.0, 12.0, 16.0)
        width, height = (320, 180) if short else (640, 360)
        clips = {
            f"clip{i}": make_clip(str(work / f"clip{i}.mp4"), seconds=s, width=width, height=height)
            for i, s in enumerate(seconds)
        }
        clips["short"] = make_clip(str(work / "short.mp4"), seconds=1.0, width=160, height=90)
        logo = make_watermark_png(str(work / "logo.png"), w=64, h=32, rgba=(255, 255, 255, 200))
        env = {"VIDFORGE_POLL_INTERVAL_MS": "500", "VIDFORGE_MAX_CONCURRENT_RENDERS": str(quota)}
        server = ServerProcess(work / "data", env=env, tokens=PRINCIPALS, warm_pool=True).start()
        try:
            assets = {
                (token, name): upload(server, path, token)
                for token in PRINCIPALS
                for name, path in {**clips, "logo": logo}.items()
            }
            wires = {token: Wire(server.url, token=token, tasks=True, elicitation=True) for token in PRINCIPALS}
            sources = sorted(c for c in clips if c != "short")
            renders = [
                Render(
                    principal_token=rng.choice(list(PRINCIPALS)),
                    clip=rng.choice(sources),
                    output_format=FORMATS[i % 3],
                    watermark=i % 2 == 0,
                    cancel=i % 5 == 4,
                )
                for i in range(count)
            ]
            for render in renders:
                created = wires[render.principal_token].tool("vidforge_render_video", render.arguments(assets))
                render.task_id = created["taskId"]
            chaos = Chaos(server, plan, interval_s=4.0 if short else 6.0, rng=rng)
            killer = threading.Thread(target=chaos.run, daemon=True)
            killer.start()
            refused: Counter[str] = Counter()
            drive(renders, wires, chaos, deadline_s=900 if short else 1800, refused=refused)
            chaos.done.set()
            killer.join(timeout=240)
            for render in renders:
                if render.status == "completed" and not render.is_error:
                    check_output(server, render, clips, logo, work)
            left_over = orphans(server, renders)
            quota_problems = quotas_are_free(server, assets, quota)
        finally:
            server.kill()  # every check is made: how the server stops is not what the run looks at
    return ChaosReport(
        renders, chaos.kills, sum(refused.values()), left_over, quota_problems, time.monotonic() - started
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="CI mode: 6 renders, one round of kills")
    parser.add_argument("--renders", type=int, help="renders to submit (default 18, short 6)")
    parser.add_argument("--seed", type=int, default=20261203)
    args = parser.parse_args()
    report = run_chaos(args.short, args.renders, args.seed)
    for name, value in report.rows():
        print(f"{name:<28}{value}")
    for line in report.failures:
        print("  " + line)
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
