"""Database chaos: the task state's PostgreSQL server stopped and started again, round after round, under a steady load.

Starts a PostgreSQL server (Debian's, as the tests do: tests/postgres.py) and `vidforge serve` on it
(VIDFORGE_STATE_URL), keeps a steady load of renders going through MCP from two principals, and in each round stops
the database with `pg_ctl -m immediate` (what a crash, an upgrade or a failover does), keeps it down for `--down-s`,
and starts it again on the same data and port. It prints, per round, how long service was gone after the database's
return (until a new render is accepted), and at the end what was lost: every render accepted must end completed with
the source's exact frame count. Each figure is printed beside its target; it exits non-zero when one is missed.

    .venv/bin/python benchmarks/database_chaos.py            # 10 rounds, 20 s down each
    .venv/bin/python benchmarks/database_chaos.py --short    # 2 rounds, 5 s down each
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests import postgres  # noqa: E402
from tests.harness import TERMINAL, ServerProcess, Wire, upload, wait_until  # noqa: E402
from tests.media import decode_all, make_clip  # noqa: E402

PRINCIPALS = {"tok-ann": "ann", "tok-ben": "ben"}
RENDER = "vidforge_render_video"
BACK_MAX_S, BACK_P50_S = 30.0, 5.0  # the targets: service back within 30 s of the database's return, p50 5 s
IN_FLIGHT = 2  # renders each principal keeps going


class Load:
    """Keeps IN_FLIGHT renders per principal going; remembers every render accepted."""

    def __init__(self, server: ServerProcess, sources: dict[str, str]) -> None:
        self.wires = {token: Wire(server.url, token=token, tasks=True) for token in PRINCIPALS}
        self.sources = sources
        self.accepted: dict[str, str] = {}  # task id -> token
        self.refused = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def submit(self, token: str) -> str | None:
        """One render, or None when it was refused (the temporary error, as it must be during an outage)."""
        arguments = {"source_asset_uri": self.sources[token], "output_format": "mp4", "resolution": "720p"}
        try:
            result = self.wires[token].tool(RENDER, arguments)
        except (httpx.HTTPError, KeyError):
            self.refused += 1
            return None
        if "taskId" not in result:
            assert result.get("structuredContent", {}).get("temporary") is True, result  # never a bare fault
            self.refused += 1
            return None
        self.accepted[result["taskId"]] = token
        return str(result["taskId"])

    def status(self, task_id: str) -> str | None:
        try:
            body = self.wires[self.accepted[task_id]].task("tasks/get", task_id)
        except httpx.HTTPError:
            return None
        if "error" in body:
            assert body["error"]["data"]["temporary"] is True, body  # the envelope, never a bare -32603
            return None
        return str(body["result"]["status"])

    def _run(self) -> None:
        live: dict[str, list[str]] = {token: [] for token in PRINCIPALS}
        while not self._stop.wait(0.5):
            for token in PRINCIPALS:
                live[token] = [t for t in live[token] if self.status(t) not in TERMINAL]
                while len(live[token]) < IN_FLIGHT and (task_id := self.submit(token)) is not None:
                    live[token].append(task_id)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="2 rounds of 5 s")
    parser.add_argument("--rounds", type=int, help="stop/start rounds (default 10, short 2)")
    parser.add_argument("--down-s", type=float, help="how long the database stays down (default 20, short 5)")
    args = parser.parse_args()
    rounds = args.rounds or (2 if args.short else 10)
    down_s = args.down_s or (5.0 if args.short else 20.0)

    database = postgres.PostgresServer()
    work = Path(tempfile.mkdtemp(prefix="vidforge-db-chaos-"))
    env = {
        "VIDFORGE_STATE_URL": database.new_database(),
        "VIDFORGE_STATE_TIMEOUT_S": "2",
        "VIDFORGE_STATE_RETRY_MAX_S": "1",
        "VIDFORGE_MAX_CONCURRENT_RENDERS": str(IN_FLIGHT * 2),
    }
    clip = make_clip(str(work / "clip.mp4"), seconds=3.0, width=640, height=360)
    frames = decode_all(clip, keep="none").frame_count
    gone_s: list[float] = []
    server = ServerProcess(work / "data", env=env, tokens=PRINCIPALS, warm_pool=True)
    try:
        server.start()
        load = Load(server, {token: upload(server, clip, token) for token in PRINCIPALS})
        load.start()
        for number in range(1, rounds + 1):
            wanted = number * IN_FLIGHT
            wait_until(lambda: len(load.accepted) >= wanted, 300, 0.2, "renders in flight")  # noqa: B023
            database.stop_server()
            time.sleep(down_s)  # the outage itself: its length is what this round measures
            database.start_server()
            back = time.monotonic()
            probe = next(iter(PRINCIPALS))
            while load.submit(probe) is None:
                time.sleep(0.1)
            gone_s.append(time.monotonic() - back)
            print(f"round {number}: database down {down_s:g} s; service back {gone_s[-1]:.1f} s after its return")
        load.stop()
        ended = {task_id: load.status(task_id) for task_id in load.accepted}
        deadline = time.monotonic() + 600
        while any(status not in TERMINAL for status in ended.values()) and time.monotonic() < deadline:
            time.sleep(1)
            ended = {t: s if s in TERMINAL else load.status(t) for t, s in ended.items()}
        lost = [task_id for task_id, status in ended.items() if status != "completed"]
        wrong = []
        for task_id, token in load.accepted.items():
            if task_id in lost:
                continue
            out = work / f"{task_id}.mp4"
            headers = {"Authorization": f"Bearer {token}"}
            video = httpx.get(f"{server.base}/artifacts/{task_id}/final.mp4", headers=headers, timeout=120)
            out.write_bytes(video.content)
            if video.status_code != 200 or decode_all(str(out), keep="none").frame_count != frames:
                wrong.append(task_id)
    finally:
        server.kill()
        database.stop()
    p50, worst = statistics.median(gone_s), max(gone_s)
    print(f"renders accepted: {len(load.accepted)}; refused while the database was away: {load.refused}")
    print(f"lost or not completed: {len(lost)}  (target 0)")
    print(f"completed but not frame-exact: {len(wrong)}  (target 0)")
    print(
        f"service gone after the database's return: p50 {p50:.1f} s (target <= {BACK_P50_S:g} s), "
        f"max {worst:.1f} s (target <= {BACK_MAX_S:g} s)"
    )
    return 0 if not lost and not wrong and p50 <= BACK_P50_S and worst <= BACK_MAX_S else 1


if __name__ == "__main__":
    sys.exit(main())
