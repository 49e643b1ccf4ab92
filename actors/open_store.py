"""Which store holds the registry's task records: SQLite in the state dir (the embedded default), or PostgreSQL
when ``VIDFORGE_STATE_URL`` names one (state that outlives the head node: docs/operating.md)."""

import os

import ray

from actors.settings import RegistrySettings
from actors.store import TaskStore


def open_task_store(settings: RegistrySettings) -> TaskStore:
    """The configured store, opened (migrated to this layout; for PostgreSQL, once this process owns it)."""
    if settings.state_url is not None:
        from actors.postgres_store import PostgresTaskStore  # the driver only where it is used

        return PostgresTaskStore(settings.state_url, on_session_lost=_end_actor_process if _in_actor() else None)
    from actors.sqlite_store import SqliteTaskStore

    return SqliteTaskStore(settings.state_dir or settings.data_dir)


def _in_actor() -> bool:
    return ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None


def _end_actor_process() -> None:
    """The registry's actor lost ownership: end its process (an unexpected exit, which Ray restarts: the detached
    registry is restarted forever, its callers' calls retried) so that the new one takes the lock before writing."""
    os._exit(1)


def state_owned_elsewhere(settings: RegistrySettings) -> bool:
    """Whether another head holds the PostgreSQL state's ownership right now (never, for SQLite's own file).

    Asked once by ``vidforge serve`` before it starts the registry, whose constructor then waits for the lock where
    only the registry's log would say why: the operator watching the server's output is told too. A lock this
    check wins is given back at once."""
    if settings.state_url is None:
        return False
    import psycopg

    from actors.postgres_store import owner_lock_key

    with psycopg.connect(settings.state_url, autocommit=True) as conn:
        row = conn.execute("SELECT current_schema()").fetchone()
        key = owner_lock_key(str(row[0]) if row else "")
        won = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
        if won and won[0]:
            conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
            return False
        return True
