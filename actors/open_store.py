"""Which store holds the registry's task records: SQLite in the state dir (the embedded default), or PostgreSQL
when ``VIDFORGE_STATE_URL`` names one (state that outlives the head node: docs/operating.md)."""

from actors.settings import RegistrySettings
from actors.store import TaskStore


def open_task_store(settings: RegistrySettings, *, wait: bool = True) -> TaskStore:
    """The configured store, opened (migrated to this layout; for PostgreSQL, once this process owns it, waiting
    while another head does unless ``wait`` is False: then ``StateOwned``)."""
    if settings.state_url is not None:
        from actors.postgres_store import PostgresTaskStore  # the driver only where it is used

        return PostgresTaskStore(
            settings.state_url,
            wait=wait,
            timeout_s=settings.state_timeout_s,
            retry_max_s=settings.state_retry_max_s,
        )
    from actors.sqlite_store import SqliteTaskStore

    return SqliteTaskStore(settings.state_dir or settings.data_dir)


def state_owned_elsewhere(settings: RegistrySettings) -> bool:
    """Whether another head holds the PostgreSQL state's ownership right now (never, for SQLite's own file).

    Asked once by ``vidforge serve`` before it starts the registry, which then answers `StateUnavailable` while it
    waits for the lock: the operator watching the server's output is told why. A lock this check wins is given back
    at once."""
    if settings.state_url is None:
        return False
    import psycopg

    from actors._postgres_session import owner_lock_key

    with psycopg.connect(settings.state_url, autocommit=True, connect_timeout=10) as conn:
        row = conn.execute("SELECT current_schema()").fetchone()
        key = owner_lock_key(str(row[0]) if row else "")
        won = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
        if won and won[0]:
            conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
            return False
        return True
