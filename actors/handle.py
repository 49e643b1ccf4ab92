"""The one place Ray meets the registry: get (or create) the cluster's TaskRegistry actor."""

import ray

from actors.task_registry import TaskRegistry

REGISTRY_NAME = "vidforge-task-registry"


def get_or_create_registry(data_dir: str, config: dict, namespace: str = "vidforge") -> ray.actor.ActorHandle:
    """One registry per cluster: a detached, named actor that outlives its creator and is restarted (and its
    in-flight calls retried) after a crash, recovering from the store under ``data_dir``.

    It reserves no CPU so it never competes with render tasks, and is async with high concurrency so
    long-polling ``watch`` calls do not block other callers.
    """
    handle = (
        ray.remote(TaskRegistry)
        .options(
            name=REGISTRY_NAME,
            namespace=namespace,
            lifetime="detached",
            get_if_exists=True,
            max_restarts=-1,
            max_task_retries=-1,
            num_cpus=0,
            # Its state (SQLite, artifacts) is on the head node's disk: never restart it elsewhere.
            resources={"node:__internal_head__": 0.001},
            max_concurrency=1000,
        )
        .remote(data_dir, config)
    )
    # Housekeeping otherwise starts with the first call; start it now (idempotent, fire-and-forget).
    handle.start.remote()
    return handle
