"""vidforge actors: the TaskRegistry (sole owner of task state), its durable stores (SQLite, PostgreSQL), and the
typed clients of the registry and the render supervisor actors."""

from actors.client import RegistryApi, SupervisorApi, open_registry
from actors.errors import InvalidTransition, QuotaExceeded, RegistryError, TaskNotFound
from actors.handle import REGISTRY_NAME
from actors.store import TaskStore
from actors.task_registry import TaskRegistry

__all__ = [
    "REGISTRY_NAME",
    "InvalidTransition",
    "QuotaExceeded",
    "RegistryApi",
    "RegistryError",
    "SupervisorApi",
    "TaskNotFound",
    "TaskRegistry",
    "TaskStore",
    "open_registry",
]
