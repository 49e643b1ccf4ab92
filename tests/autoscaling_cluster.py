"""A Ray cluster that Ray's own autoscaler grows and shrinks, on this machine (issue 20): the fake multi-node provider.

`ray.cluster_utils.AutoscalingCluster` is Ray's way to run it, but its `start` begins with `ray stop --force`, which
stops every Ray instance on the machine (other test modules' and other people's), and the provider's example config
it reads is not in the wheel. So this starts the same thing by hand, the way tests/cluster.py starts its nodes: one
`ray start --head --block --autoscaling-config=...` process in a session of its own, on loopback ports of its own,
with RAY_FAKE_CLUSTER=1. Its autoscaler (Ray's monitor, on the head) starts each worker node it decides on as a real
raylet on this machine (`FakeMultiNodeProvider`), and stops it after `idle_timeout_minutes` without work. Those nodes
are children of the monitor, in the head's session: stopping the cluster kills that session.

The head takes no render work (no CPUs, as cluster.yaml's), and every worker type starts at 0 nodes. Worker nodes
inherit the monitor's environment, which holds no VIDFORGE_* or AWS_* variable: what vidforge's tasks need has to
travel with the job.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tests.cluster import RAY, own_ports
from tests.harness import free_port, session_processes, wait_until

START_TIMEOUT_S = 180
OBJECT_STORE_BYTES = 200 * 1024**2  # per node: small segments only; spares the machine's /dev/shm
HEAD_TYPE = "ray.head.default"
# The head's address. A test's driver joins through the head's raylet, which stays for the whole test, rather than
# any raylet Ray finds on this host: worker nodes come and go under the autoscaler.
HEAD_IP = "127.0.0.1"


@dataclass(frozen=True)
class NodeType:
    """An autoscaler worker type: `cpus` CPUs and `gpus` declared GPUs (a resource name only: no device behind
    it), 0 to `max_workers` nodes."""

    cpus: int
    max_workers: int
    gpus: int = 0

    def config(self) -> dict[str, object]:
        resources = {"CPU": self.cpus, "object_store_memory": OBJECT_STORE_BYTES} | (
            {"GPU": self.gpus} if self.gpus else {}
        )
        return {"resources": resources, "node_config": {}, "min_workers": 0, "max_workers": self.max_workers}


def cpu_worker(cpus: int, max_workers: int) -> NodeType:
    return NodeType(cpus, max_workers)


def gpu_worker(cpus: int, max_workers: int) -> NodeType:
    return NodeType(cpus, max_workers, gpus=1)


@dataclass
class FakeAutoscalingCluster:
    root: Path  # short (unix socket paths under it are limited to 108 bytes)
    worker_types: dict[str, NodeType]
    idle_timeout_minutes: float = 0.1
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.root / "head.log"

    @property
    def max_workers(self) -> int:
        return sum(t.max_workers for t in self.worker_types.values())

    def config(self) -> dict[str, object]:
        """The autoscaling config, as Ray's fake_multi_node example has it, with these worker types."""
        return {
            "cluster_name": "vidforge-fake",
            "max_workers": self.max_workers,
            "provider": {
                "type": "fake_multinode",
                "use_node_id_as_ip": True,
                "disable_node_updaters": True,
                "disable_launch_config_check": True,
                "gcs_address": self.address,
            },
            "available_node_types": {
                HEAD_TYPE: {"resources": {"CPU": 0}, "node_config": {}, "max_workers": 0},
                **{name: node_type.config() for name, node_type in self.worker_types.items()},
            },
            "head_node_type": HEAD_TYPE,
            "auth": {},
            "upscaling_speed": 1.0,
            "idle_timeout_minutes": self.idle_timeout_minutes,
            "docker": {},
            "initialization_commands": [],
            "setup_commands": [],
            "head_setup_commands": [],
            "worker_setup_commands": [],
            "head_start_ray_commands": [],
            "worker_start_ray_commands": [],
            "file_mounts": {},
            "cluster_synced_files": [],
            "file_mounts_sync_continuously": False,
            "rsync_exclude": [],
            "rsync_filter": [],
        }

    def env(self) -> dict[str, str]:
        """The head's environment, and so every worker node's: no Ray, vidforge or AWS setting of the caller's."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "VIDFORGE_", "AWS_"))}
        # No token auth: the test process joins as a driver, and its other modules' local Ray must stay as it is.
        env.update(
            RAY_FAKE_CLUSTER="1",
            AUTOSCALER_UPDATE_INTERVAL_S="1",
            RAY_USAGE_STATS_ENABLED="0",
            RAY_AUTH_MODE="disabled",
        )
        return env

    def start(self) -> FakeAutoscalingCluster:
        self.root.mkdir(parents=True, exist_ok=True)
        config_path = self.root / "autoscaling.json"
        config_path.write_text(json.dumps(self.config()))
        command = [
            RAY,
            "start",
            "--head",
            "--block",
            f"--node-ip-address={HEAD_IP}",
            f"--port={self.port}",
            "--num-cpus=0",
            f"--autoscaling-config={config_path}",
            f"--temp-dir={self.root / 'ray'}",
            f"--object-store-memory={OBJECT_STORE_BYTES}",
            "--include-dashboard=false",
            f"--ray-client-server-port={free_port()}",
            *own_ports(),
            "--disable-usage-stats",
        ]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                command, env=self.env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        wait_until(self._started, START_TIMEOUT_S, interval=0.5, message="the autoscaling head to start")
        return self

    def _started(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"ray start --head exited:\n{self.log_path.read_text()[-4000:]}")
        return "Ray runtime started" in self.log_path.read_text(errors="replace")

    def monitor_log(self) -> str:
        """What the autoscaler wrote (its decisions: launches, idle terminations)."""
        logs = sorted((self.root / "ray").glob("session_*/logs/monitor.*"))
        return "\n".join(path.read_text(errors="replace") for path in logs)

    def stop(self) -> None:
        """SIGKILL every process of the head's session: the head's, the autoscaler's worker nodes', their workers."""
        if self.proc is None:
            return
        for pid, _ in session_processes(self.proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue
        self.proc.wait(timeout=30)
        self.proc = None
