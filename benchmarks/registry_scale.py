"""Registry scale: what a week of retained results costs the TaskRegistry (issue 36).

For each size N, a store is filled with N finished renders (their records real `TaskRecord`s, bulk-written
through the store's own table layout) and 300 renders in flight, their creation spread over the retention so
that one sweep batch is past it. Then, in a fresh process (so the filling's allocations do not count), the
`TaskRegistry` class runs in-process on that store (no Ray, no HTTP), and is measured:

- restart: the constructor (opening the store and loading what the registry holds in memory);
- resident memory of the process after the restart (VmRSS);
- `create` p50/p99, the durable write (an fsynced commit) included;
- `get` of a finished record that is not in the registry's cache, p50/p99 (read from the store by key);
- one `sweep()` pass (which deletes the expired batch).

Each figure is printed beside its target, and beside its value at the smallest size (each within 2x of it).

    .venv/bin/python benchmarks/registry_scale.py                       # 10 000 and 1 000 000 records, SQLite
    .venv/bin/python benchmarks/registry_scale.py --short               # 10 000 and 100 000
    .venv/bin/python benchmarks/registry_scale.py --records 10000,50000
    .venv/bin/python benchmarks/registry_scale.py --postgresql     # on a PostgreSQL server of its own
    .venv/bin/python benchmarks/registry_scale.py --state-url postgresql://USER:PASSWORD@HOST/DB  # emptied first!

On PostgreSQL the records go in through the store's bulk import (as `vidforge state migrate` writes them), and the
figures are the registry's process only: the server's own memory is not in its resident memory.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from actors.open_store import open_task_store  # noqa: E402
from actors.settings import public_database_url  # noqa: E402
from actors.sqlite_store import SqliteTaskStore  # noqa: E402
from actors.store import TASK_COLUMNS, task_row  # noqa: E402
from actors.task_registry import TaskRegistry  # noqa: E402
from mcp_protocol.domain import Artifact, Phase, RenderRequest, Succeeded, TaskRecord, TaskStatus  # noqa: E402
from serve_app._config import Config  # noqa: E402

IN_FLIGHT = 300
PRINCIPALS = 50
CREATES = 300
GETS = 500
RETENTION_S = 604_800  # the default VIDFORGE_RESULT_RETENTION_S
TARGETS = {  # figure -> (target, unit)
    "restart_s": (5.0, "s"),
    "rss_mib": (1024.0, "MiB"),
    "create_p99_ms": (20.0, "ms"),
    "get_p99_ms": (5.0, "ms"),
    "sweep_s": (1.0, "s"),
}
REQUEST = RenderRequest(source_asset_uri="vidforge://assets/a_" + "1" * 24, output_format="mp4", resolution="720p")


def settings(data_dir: str, state_url: str | None) -> Config:
    # The background sweep never runs on its own: the one pass measured is called.
    return Config(data_dir=data_dir, state_url=state_url, sweep_interval_s=3600, max_concurrent_renders=1000)


def records(count: int, now_ms: int) -> Iterator[TaskRecord]:
    """``count`` finished renders created over the retention (the oldest `sweep_batch` of them just past it), then
    the renders in flight."""
    done = TaskRecord(
        task_id="task_template",
        principal="p0",
        request=REQUEST,
        status=TaskStatus.COMPLETED,
        phase=Phase.DONE,
        status_message="Render complete.",
        frames_done=900,
        frames_total=900,
        created_at_ms=0,
        last_updated_at_ms=0,
        ttl_ms=3_600_000,
        poll_interval_ms=10_000,
        end=Succeeded(artifact=Artifact(ext="mp4", size_bytes=4_000_000, duration_s=30.0, finished_at_ms=0)),
        version=6,
    )
    live = TaskRecord(
        task_id="task_template",
        principal="p0",
        request=REQUEST,
        status_message="Render queued; encoding starts shortly.",
        created_at_ms=0,
        last_updated_at_ms=0,
        ttl_ms=3_600_000,
        poll_interval_ms=10_000,
    )
    step_ms = RETENTION_S * 1000 // count
    # Each finished a minute after its creation; the first 500 (a sweep batch) are past the retention.
    start_ms = now_ms - RETENTION_S * 1000 - 500 * step_ms - 60_000
    for n in range(count + IN_FLIGHT):
        at = start_ms + n * step_ms if n < count else now_ms - (count + IN_FLIGHT - n) * 1000
        template = done if n < count else live
        update: dict[str, object] = {"task_id": task_id(n), "principal": f"p{n % PRINCIPALS}"}
        update.update(created_at_ms=at, last_updated_at_ms=at + 60_000)
        if n < count:
            artifact = done.end.artifact.model_copy(update={"finished_at_ms": at + 60_000})  # type: ignore[union-attr]
            update["end"] = Succeeded(artifact=artifact)
        yield template.model_copy(update=update)


def task_id(n: int) -> str:
    return f"task_bench{n:021d}"


def fill(config: Config, count: int, now_ms: int) -> None:
    """Write the records in one transaction: through the store's table (SQLite) or its bulk import (PostgreSQL)."""
    rows = (task_row(rec) for rec in records(count, now_ms))
    if config.state_url is not None:
        store = open_task_store(config.registry_settings())
        store.import_rows(rows, [], replace=True)  # type: ignore[attr-defined]  # PostgresTaskStore's bulk copy
        store.close()
        return
    SqliteTaskStore(config.data_dir).close()  # the current layout, its indexes included
    with sqlite3.connect(Path(config.data_dir) / SqliteTaskStore.FILENAME) as conn:
        conn.executemany(f"INSERT INTO tasks ({TASK_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)", rows)


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


async def measure(config: Config, count: int, now_ms: int) -> dict[str, float]:
    """The figures, in this (fresh) process."""
    started = time.perf_counter()
    reg = TaskRegistry(config.registry_settings(), clock=lambda: now_ms / 1000)
    restart_s = time.perf_counter() - started
    figures = {"restart_s": restart_s, "rss_mib": rss_mib()}
    creates = []
    for n in range(CREATES):
        started = time.perf_counter()
        await reg.create(f"p{n % PRINCIPALS}", REQUEST)
        creates.append((time.perf_counter() - started) * 1000)
    gets = []
    for n in random.Random(36).sample(range(500, count), GETS):  # none cached: the restart loaded none of them
        started = time.perf_counter()
        found = await reg.get(f"p{n % PRINCIPALS}", task_id(n))
        gets.append((time.perf_counter() - started) * 1000)
        assert found is not None and found.status.terminal
    started = time.perf_counter()
    report = await reg.sweep()
    figures["sweep_s"] = time.perf_counter() - started
    assert report.tasks_deleted == 500, report
    figures.update(
        create_p50_ms=percentile(creates, 50),
        create_p99_ms=percentile(creates, 99),
        get_p50_ms=percentile(gets, 50),
        get_p99_ms=percentile(gets, 99),
    )
    reg.close()
    return figures


def run_size(count: int, state_url: str | None) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="registry-scale-") as data_dir:
        config = settings(data_dir, state_url)
        now_ms = int(time.time() * 1000)
        started = time.perf_counter()
        fill(config, count, now_ms)
        print(
            f"  filled {count:,} finished + {IN_FLIGHT} in flight in {time.perf_counter() - started:.1f} s", flush=True
        )
        child = subprocess.run(
            [sys.executable, __file__, "--measure", str(count), "--data-dir", data_dir, "--now-ms", str(now_ms)],
            env={**os.environ, **({"VIDFORGE_STATE_URL": state_url} if state_url else {})},
            capture_output=True,
            text=True,
        )
        if child.returncode != 0:
            sys.exit(f"measuring {count:,} records failed:\n{child.stderr}")
        return dict(json.loads(child.stdout.splitlines()[-1]))


def report(results: dict[int, dict[str, float]]) -> None:
    base_count = min(results)
    base = results[base_count]
    for count, figures in results.items():
        print(f"\n{count:,} finished records + {IN_FLIGHT} in flight")
        for name, value in figures.items():
            target = TARGETS.get(name)
            line = f"  {name:<14} {value:10.2f}"
            if target is not None:
                limit, unit = target
                line += f" {unit:<4} target <= {limit:g} {unit}: {'ok' if value <= limit else 'MISSED'}"
            if count != base_count and name in TARGETS:
                ratio = value / base[name] if base[name] else float("inf")
                line += f"; {ratio:.2f}x its value at {base_count:,} (target <= 2x: {'ok' if ratio <= 2 else 'MISSED'})"
            print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", default="10000,1000000", help="comma-separated sizes (the smallest: the base)")
    parser.add_argument("--short", action="store_true", help="10 000 and 100 000 records: a quick run")
    backend = parser.add_mutually_exclusive_group()
    backend.add_argument("--state-url", help="postgresql://… : measure on PostgreSQL (its tables are emptied first)")
    backend.add_argument(
        "--postgresql",
        action="store_true",
        help="measure on a PostgreSQL server started for the run (tests/postgres.py: Debian's postgresql package)",
    )
    parser.add_argument("--measure", type=int, help=argparse.SUPPRESS)  # the fresh process's part
    parser.add_argument("--data-dir", help=argparse.SUPPRESS)
    parser.add_argument("--now-ms", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure is not None:
        config = settings(args.data_dir, os.environ.get("VIDFORGE_STATE_URL"))
        print(json.dumps(asyncio.run(measure(config, args.measure, args.now_ms))))
        return
    sizes = [10_000, 100_000] if args.short else sorted(int(size) for size in args.records.split(","))
    state_url = args.state_url
    if args.postgresql:
        from tests import postgres  # stopped when this process exits

        state_url = postgres.postgres_server().new_database()
    where = public_database_url(state_url) if state_url else "SQLite"
    print(f"registry scale on {where}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    results = {}
    for count in sizes:
        results[count] = run_size(count, state_url)
    report(results)
    print(f"\nload average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
