"""A Ray cluster of separate `ray start` nodes on this machine, for the multi-node tests (issue 10).

Every node is its own `ray start --block` process, in a session of its own, with its own `--temp-dir` and
ports, all on loopback: a head that takes no render work (`--num-cpus=0`, as cluster.yaml starts it) and
worker nodes with a CPU or two each. Token authentication is on, with this cluster's own token handed to
every node and client in `RAY_AUTH_TOKEN` (with `RAY_AUTH_MODE=token`): `~/.ray/auth_token`, which the
local `ray.init` of the other tests uses, is never read or written, and this test process never joins the
cluster (so its own Ray state is untouched): what the cluster did is read from the Ray state API over the
head's dashboard HTTP port (`/api/v0/...`, the REST side of `ray.util.state`).

Stopping a node kills its session — exactly that node's raylet, workers and agents, as if its machine were
gone — and never another Ray instance on the machine (`ray stop` would stop every one of them).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.harness import RAY_START_ENV, free_port, session_processes, wait_until

RAY = str(Path(sys.executable).with_name("ray"))
START_TIMEOUT_S = 180
OBJECT_STORE_BYTES = 300 * 1024**2  # small segments only; spares the machine's /dev/shm


def own_ports() -> list[str]:
    """`ray start` flags giving a node a free port for each of its own servers, so that several nodes and
    clusters of tests share this machine (Ray's fixed defaults would collide)."""
    servers = ("node-manager", "object-manager", "metrics-export", "runtime-env-agent")
    servers += ("dashboard-agent-listen", "dashboard-agent-grpc")
    return [f"--{server}-port={free_port()}" for server in servers]


@dataclass
class Node:
    """One `ray start --block` process; `name` is also a custom resource only this node has, which is how
    its Ray node id is found."""

    name: str
    proc: subprocess.Popen
    log_path: Path
    node_id: str = ""
    killed: bool = False

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL every process of the node's session (its raylet, workers and agents), then reap. Also when
        `ray start` itself has exited: what it started may still run."""
        if not self.killed:
            _kill_session(self.proc.pid)
            self.proc.wait(timeout=30)
            self.killed = True


@dataclass
class LocalCluster:
    root: Path
    node_env: dict[str, str] = field(default_factory=dict)  # what else every node runs with (e.g. AWS_*)
    token: str = field(default_factory=lambda: secrets.token_hex(32))
    port: int = field(default_factory=free_port)
    dashboard_port: int = field(default_factory=free_port)
    nodes: dict[str, Node] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """What every node and every client of this cluster runs with: its token, `node_env`, and Ray's start-up wait
        for a loaded machine (RAY_START_ENV)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        env.update(self.node_env)
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=self.token, RAY_USAGE_STATS_ENABLED="0", **RAY_START_ENV)
        return env

    def start(self, worker_cpus: tuple[int, ...] = (1, 1)) -> LocalCluster:
        head = self._launch(
            "head",
            "--head",
            f"--port={self.port}",
            "--num-cpus=0",
            "--include-dashboard=true",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={self.dashboard_port}",
            f"--ray-client-server-port={free_port()}",
        )
        wait_until(lambda: self._started(head), START_TIMEOUT_S, interval=0.5, message="the head node to start")
        for i, cpus in enumerate(worker_cpus, 1):
            self._launch(f"worker{i}", f"--address={self.address}", f"--num-cpus={cpus}", "--include-log-monitor=false")
        wait_until(self._all_registered, START_TIMEOUT_S, interval=1.0, message="every node to join the cluster")
        return self

    def _launch(self, name: str, *args: str) -> Node:
        temp_dir = self.root / name
        temp_dir.mkdir(parents=True)
        log_path = self.root / f"{name}.log"
        command = [
            RAY,
            "start",
            "--block",
            "--node-ip-address=127.0.0.1",
            f"--temp-dir={temp_dir}",
            f"--resources={json.dumps({name: 1})}",
            f"--object-store-memory={OBJECT_STORE_BYTES}",
            *own_ports(),
            "--disable-usage-stats",
            *args,
        ]
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(command, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        node = self.nodes[name] = Node(name, proc, log_path)
        return node

    def _started(self, node: Node) -> bool:
        if not node.alive():
            raise AssertionError(f"ray start {node.name} exited:\n{node.log_path.read_text()[-4000:]}")
        return "Ray runtime started" in node.log_path.read_text(errors="replace")

    def _all_registered(self) -> bool:
        for node in self.nodes.values():
            self._started(node)
        try:
            listed = self.state("nodes")
        except httpx.HTTPError:
            return False
        ids = {
            name: entry["node_id"]
            for entry in listed
            if entry["state"] == "ALIVE"
            for name in entry["resources_total"]
            if name in self.nodes
        }
        if set(ids) != set(self.nodes):
            return False
        for name, node_id in ids.items():
            self.nodes[name].node_id = node_id
        return True

    def state(self, resource: str, **filters: str) -> list[dict]:
        """`GET /api/v0/<resource>` of the state API (nodes, tasks, actors, ...), with equality filters."""
        params: list[tuple[str, str]] = [("detail", "true"), ("limit", "10000")]
        for key, value in filters.items():
            params += [("filter_keys", key), ("filter_predicates", "="), ("filter_values", value)]
        response = httpx.get(
            f"http://127.0.0.1:{self.dashboard_port}/api/v0/{resource}",
            params=params,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=30,
        )
        response.raise_for_status()
        return response.json()["data"]["result"]["result"]

    def node_name(self, node_id: str | None) -> str | None:
        """Which of this cluster's nodes has `node_id` (None for a task not placed yet)."""
        return next((name for name, node in self.nodes.items() if node.node_id == node_id), None)

    def stop(self) -> None:
        """Kill every node, workers first; safe to call at any point of `start`."""
        for node in sorted(self.nodes.values(), key=lambda n: n.name == "head"):
            node.kill()


def _kill_session(sid: int) -> None:
    """SIGKILL every process in session `sid` (the node's processes and no others; see session_processes)."""
    for pid, _ in session_processes(sid):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue
