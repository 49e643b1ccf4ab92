"""`vidforge serve` ends when the Ray runtime under it dies: one line naming what died, exit 3, its port freed.

Without this, a server whose raylet was killed kept running: its ingress replicas went on answering `/healthz`,
`/readyz` said 503 and `tasks/get` hung, with nothing to tell a supervisor (systemd, Kubernetes, the person at
`make serve`) to start it again. Ray gives no such signal itself: a worker leaves when its raylet is gone only once
that raylet has been reaped, and the embedded raylet's parent is this process, which never reaped it while it
waited.

The checks, every CHECK_INTERVAL_S while the server runs (`RayWatch.until`):
- the local raylet (the process named `raylet` that runs this node's id): its exit, embedded or joined;
- an embedded Ray's GCS (this process's child `gcs_server`): its exit;
- a joined cluster's GCS: its address refusing connections for VIDFORGE_GCS_GRACE_S on end (a GCS with fault
  tolerance comes back within that; Ray's own workers wait 60 s for it).

Then, for an embedded Ray, everything of it is killed before the exit, so the port is free once `vidforge serve`
has exited: the raylet's workers (the ingress replicas that hold the port among them, found by the raylet's pid
that Ray hands each of them in RAY_RAYLET_PID; the raylet, a child not yet reaped, keeps that pid its own until
then) and this process's own children, Ray's system processes. A joined cluster is not this process's: its Serve
application stays where it runs (the replicas on a dead raylet's node go with it), and a `vidforge serve` started
again joins it and deploys again.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass

import psutil

EXIT_RAY_LOST = 3
CHECK_INTERVAL_S = 0.5
CONNECT_TIMEOUT_S = 2.0  # one probe of a joined cluster's GCS address
KILL_WAIT_S = 10.0  # a SIGKILLed process is gone in milliseconds; bounded all the same


@dataclass(frozen=True)
class RayLoss:
    """What died: `description` names it; `pid` is that of a process of this host, where one died."""

    description: str
    pid: int | None = None

    def line(self, how: str = "") -> str:
        """The one line: `how`, when known, says how the process ended."""
        died = f"{self.description} ({how})" if how else self.description
        return f"vidforge: {died}; vidforge serve exits with status {EXIT_RAY_LOST}: start it again"


def _exit_text(returncode: int | None) -> str:
    if returncode is None:
        return ""
    if returncode < 0:
        return f"killed by {signal.Signals(-returncode).name}"
    return f"exit status {returncode}"


def _dead(proc: psutil.Process) -> bool:
    """Exited: gone (its pid perhaps another process's by now), or a zombie whose exit nobody has read yet."""
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _local_raylet(node_id: str) -> psutil.Process | None:
    """This node's raylet: the process named `raylet` that runs `--node_id=<node_id>`."""
    flag = f"--node_id={node_id}"
    for proc in psutil.process_iter(["name", "cmdline"]):
        if proc.info["name"] == "raylet" and flag in (proc.info["cmdline"] or ()):
            return proc
    return None


def _gcs_refuses(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S):
            return False
    except OSError:
        return True


class RayWatch:
    """The Ray runtime this process is connected to, checked for a part that died (see the module docstring)."""

    def __init__(self, gcs_address: str, node_id: str, joined: bool, gcs_grace_s: float) -> None:
        self.gcs_address = gcs_address
        self.joined = joined
        self.gcs_grace_s = gcs_grace_s
        self.raylet = _local_raylet(node_id)
        children = [] if joined else psutil.Process().children()
        self.gcs = next((proc for proc in children if proc.name() == "gcs_server"), None)
        self._gcs_refused_since: float | None = None

    @classmethod
    def of_connected(cls, joined: bool, gcs_grace_s: float) -> RayWatch:
        """The watch of the Ray runtime `ray.init` connected this process to."""
        import ray

        context = ray.get_runtime_context()
        return cls(context.gcs_address, context.get_node_id(), joined, gcs_grace_s)

    def lost(self) -> RayLoss | None:
        """The part of Ray that died since the last check, if one did."""
        cluster = f" of the Ray cluster at {self.gcs_address}" if self.joined else ""
        if self.raylet is not None and _dead(self.raylet):
            return RayLoss(f"Ray's raylet (pid {self.raylet.pid}) of this node{cluster} died", self.raylet.pid)
        if self.gcs is not None and _dead(self.gcs):
            return RayLoss(f"Ray's GCS server (pid {self.gcs.pid}) died", self.gcs.pid)
        if self.joined and self._gcs_gone():
            return RayLoss(
                f"the GCS{cluster} has refused connections for {self.gcs_grace_s:g} s (VIDFORGE_GCS_GRACE_S)"
            )
        return None

    def _gcs_gone(self) -> bool:
        if not _gcs_refuses(self.gcs_address):
            self._gcs_refused_since = None
            return False
        now = time.monotonic()
        if self._gcs_refused_since is None:
            self._gcs_refused_since = now
        return now - self._gcs_refused_since >= self.gcs_grace_s

    def until(self, stop: threading.Event) -> None:
        """Return once `stop` is set; if Ray dies first, end this process: EXIT_RAY_LOST, after the one line."""
        while not stop.wait(CHECK_INTERVAL_S):
            loss = self.lost()
            # Ctrl-C reaches Ray's processes too (one process group): a part of Ray that a stop ended is no loss.
            if loss is not None and not stop.is_set():
                self._end(loss)

    def _end(self, loss: RayLoss) -> None:
        exits = {} if self.joined else self._kill_embedded()
        how = _exit_text(exits[loss.pid]) if loss.pid in exits else ""
        sys.stdout.flush()
        print(loss.line(how), file=sys.stderr, flush=True)
        # Not a return through ray.shutdown() and the interpreter's exit: both wait on the Ray that is gone.
        os._exit(EXIT_RAY_LOST)

    def _kill_embedded(self) -> dict[int, int | None]:
        """SIGKILL the raylet's workers, then this process's children (Ray's own processes), and reap; the exit
        status of each child by pid."""
        workers = _workers_of(self.raylet.pid) if self.raylet is not None else []
        children = psutil.Process().children()
        for proc in [*workers, *children]:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(workers, timeout=KILL_WAIT_S)
        exits: dict[int, int | None] = {}
        for child in children:
            with contextlib.suppress(psutil.Error):
                exits[child.pid] = child.wait(timeout=KILL_WAIT_S)
        return exits


def _workers_of(raylet_pid: int) -> list[psutil.Process]:
    """The processes the raylet started (workers, agents): Ray sets RAY_RAYLET_PID in each one's environment."""
    mine = os.getpid()
    found = []
    for proc in psutil.process_iter():
        if proc.pid == mine:
            continue
        with contextlib.suppress(psutil.Error):
            if proc.environ().get("RAY_RAYLET_PID") == str(raylet_pid):
                found.append(proc)
    return found
