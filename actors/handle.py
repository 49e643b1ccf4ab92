"""The one place Ray meets the registry: get (or create) the cluster's TaskRegistry actor."""

import ray

from actors.task_registry import TaskRegistry

REGISTRY_NAME = "vidforge-task-registry"


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


def get_or_create_registry(data_dir: str, config: dict, namespace: str = "vidforge") -> ray.actor.ActorHandle:
    """One registry per cluster, recovering from the store under ``data_dir`` whenever it is restarted."""
    handle = ray.remote(TaskRegistry).options(**singleton_actor_options(REGISTRY_NAME, namespace)).remote(
        data_dir, config
    )
    # Housekeeping otherwise starts with the first call; start it now (idempotent, fire-and-forget).
    handle.start.remote()
    return handle
