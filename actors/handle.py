"""The cluster's service actors by name, and how each is placed: the TaskRegistry and the render supervisor (created
and called through actors.client), and the ingress's lease ledger and the metrics exporter (serve_app)."""

from typing import Any

REGISTRY_NAME = "vidforge-task-registry"
SUPERVISOR_NAME = "vidforge-render-supervisor"


def singleton_actor_options(name: str, namespace: str) -> dict[str, Any]:
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
