"""vidforge actors: the TaskRegistry (sole owner of task state) and its durable store."""

from actors.errors import InvalidTransition, QuotaExceeded, RegistryError, TaskNotFound
from actors.handle import REGISTRY_NAME, get_or_create_registry
from actors.store import TaskStore
from actors.task_registry import TaskRegistry

__all__ = [
    "REGISTRY_NAME",
    "InvalidTransition",
    "QuotaExceeded",
    "RegistryError",
    "TaskNotFound",
    "TaskRegistry",
    "TaskStore",
    "get_or_create_registry",
]
