"""The one place Ray meets the registry: get (or create) the cluster's TaskRegistry actor, and the registry's
way to the render supervisor."""

import logging
from typing import Any

import ray

from actors.observer import RegistryObserver
from actors.settings import RegistrySettings
from actors.task_registry import TaskRegistry

log = logging.getLogger(__name__)

REGISTRY_NAME = "vidforge-task-registry"
SUPERVISOR_NAME = "vidforge-render-supervisor"


class NamedSupervisor:
    """The registry's ``Driver`` in a cluster: asks the render supervisor actor, found by name, to start a
    task. Fire-and-forget: the supervisor's start is idempotent, and the registry's sweep asks again when no
    lease renewal follows (the supervisor restarting, or not created yet while the server starts)."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self._handle: Any = None  # looked up on first use, in the registry's process; a handle outlives restarts

    def drive(self, task_id: str) -> None:
        if self._handle is None:
            try:
                self._handle = ray.get_actor(SUPERVISOR_NAME, namespace=self.namespace)
            except ValueError:
                log.warning("no render supervisor yet to drive %s; the next sweep asks again", task_id)
                return
        self._handle.start.remote(task_id)


def singleton_actor_options(name: str, namespace: str) -> dict:
    """Options for a cluster-singleton service actor: detached and named (outlives its creator; found by
    name), restarted forever with its in-flight calls retried, no CPU reserved (never competes with render
    tasks), async with high concurrency (long polls do not block other callers), and pinned to the head
    node, whose disk holds its state."""
    return {
        "name": name,
        "namespace": namespace,
        "lifetime": "detached",
        "get_if_exists": True,
        "max_restarts": -1,
        "max_task_retries": -1,
        "num_cpus": 0,
        "resources": {"node:__internal_head__": 0.001},
        "max_concurrency": 1000,
    }


def get_or_create_registry(config: RegistrySettings, observer: RegistryObserver | None = None) -> ray.actor.ActorHandle:
    """One registry per cluster (per ``config.namespace``), recovering from the store under ``config.state_dir``
    (on the head node, where it is pinned) whenever it is restarted; its sweep deletes expired files from the
    media store and re-drives unleased tasks through the namespace's render supervisor. ``observer`` (pickled into
    the actor) is told of its records when the actor is created; a registry already running keeps its own."""
    handle = (
        ray.remote(TaskRegistry)
        .options(**singleton_actor_options(REGISTRY_NAME, config.namespace))
        .remote(config, driver=NamedSupervisor(config.namespace), observer=observer)
    )
    # Housekeeping otherwise starts with the first call; start it now (idempotent, fire-and-forget).
    handle.start.remote()
    return handle
