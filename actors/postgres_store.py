"""The task store in PostgreSQL (``VIDFORGE_STATE_URL``): state that outlives the head node, owned by one head at a time.

Same tables and indexes as ``actors.sqlite_store`` (timestamps as BIGINT, each record as its JSON text); the
layout version is the one row of ``vidforge_schema``. Ownership: the store takes a session-level advisory lock,
keyed by the schema its tables live in, on the one connection it reads and writes through, and waits (saying so
once) while another head holds it. Every write goes through that session, so a head whose session is gone cannot
write.

A database that goes away (restarted, failed over, hung) stops nothing for good: every call is bounded
(``timeout_s``: libpq's connect timeout, the server's statement timeout, TCP keepalives, and a watchdog that shuts the
socket of a call past its bound, for a server that accepted the connection and stopped answering); a broken session
answers `StateUnavailable` at once while a thread connects again with jittered backoff, takes the lock again
(ending this store's own abandoned session if that still holds it) and only then lets writes through. Each new
session has a new `session()` number: the registry reloads what it holds from the store when it changes, since a
commit whose answer was lost may have landed.
"""

import hashlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import TupleRow

from actors.backoff import Backoff
from actors.errors import StateOwned
from actors.settings import public_database_url
from actors.store import (
    BACKLOG,
    DELIVERY_COLUMNS,
    DROP_SETTLED,
    DUE_CONDITION,
    OUTBOX_COLUMNS,
    OUTBOX_INDEXES,
    OUTBOX_INSERT,
    OUTBOX_TABLE,
    RECORD_ATTEMPT,
    SCHEMA_VERSION,
    TASK_COLUMNS,
    TaskRow,
    attempt_row,
    delivery_of,
    list_deliveries_query,
    migrated_record,
    outbox_row,
    retain_from_ms,
    sql_statements,
    task_row,
)
from mcp_protocol.domain import TERMINAL, TaskRecord, TaskStatus
from mcp_protocol.state_outage import StateUnavailable
from mcp_protocol.webhook_events import Attempt, Backlog, Delivery, OutboxEvent

__all__ = ["PostgresTaskStore", "StateOwned", "owner_lock_key"]
log = logging.getLogger(__name__)
T = TypeVar("T")
Connection = psycopg.Connection[TupleRow]

_TABLES = """
CREATE TABLE IF NOT EXISTS vidforge_schema (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS tasks (
    task_id         TEXT PRIMARY KEY,
    principal       TEXT NOT NULL,
    status          TEXT NOT NULL,
    idempotency_key TEXT,
    created_at_ms   BIGINT NOT NULL,
    record          TEXT NOT NULL,
    retain_from_ms  BIGINT
);
CREATE TABLE IF NOT EXISTS idempotency (
    principal     TEXT NOT NULL,
    key           TEXT NOT NULL,
    task_id       TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (principal, key)
)
"""
# The SQLite store's indexes, for the same queries (see actors.sqlite_store).
_INDEXES = """
CREATE INDEX IF NOT EXISTS tasks_by_principal ON tasks (principal, created_at_ms, task_id);
CREATE INDEX IF NOT EXISTS tasks_by_status ON tasks (status);
CREATE INDEX IF NOT EXISTS tasks_by_retention ON tasks (retain_from_ms, task_id);
CREATE INDEX IF NOT EXISTS idempotency_by_claim ON idempotency (created_at_ms);
CREATE INDEX IF NOT EXISTS idempotency_by_task ON idempotency (task_id)
"""
_LIVE_STATUSES = [status.value for status in TaskStatus if not status.terminal]
_TERMINAL_STATUSES = [status.value for status in TERMINAL]
KEY_COLUMNS = "principal, key, task_id, created_at_ms"  # an idempotency row's values, in this order
KeyRow = tuple[str, str, str, int]
OWNER_RETRY_S = 1.0  # how often a waiting head asks for the lock again
DEFAULT_TIMEOUT_S = 5.0  # serve_app.config's VIDFORGE_STATE_TIMEOUT_S default, for the store's other users
DEFAULT_RETRY_MAX_S = 5.0
# Keepalives on the owning session, both ways (the client's are connect()'s keepalives_* below): a head cut off from the database (its node lost, not just its
# process) lets go of the lock within about idle + interval x count seconds instead of the kernel's two hours, and
# this side notices a silent peer as soon.
_SERVER_KEEPALIVE = {"tcp_keepalives_idle": 10, "tcp_keepalives_interval": 5, "tcp_keepalives_count": 3}
# What a lost or useless session looks like: the connection's own failures (class 08), the server shutting down or
# cancelling (57: admin shutdown, crash recovery, statement timeout), out of resources (53: disk full), and a
# server that became a read-only standby (a failover that left this session on the old primary).
_UNAVAILABLE = (psycopg.OperationalError, psycopg.InterfaceError, pg_errors.ReadOnlySqlTransaction)


def owner_lock_key(schema: str) -> int:
    """The advisory lock's key for the state in ``schema``: the same for every head, a signed 64-bit integer."""
    digest = hashlib.sha256(f"vidforge task state:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class _Watchdog:
    """Bounds one call on the session from this side. A server that accepted the connection and stopped answering
    is reached by no statement timeout (it never reads the statement) and its kernel answers keepalives, so a call
    past its bound has its socket shut down: the blocked read returns at once and the session counts as lost."""

    def __init__(self, bound_s: float) -> None:
        self.bound_s = bound_s
        self._cv = threading.Condition()
        self._deadline: float | None = None
        self._fd = -1
        self.fired = False
        self._thread: threading.Thread | None = None

    def bounded(self, conn: Connection) -> "_Bounded":
        return _Bounded(self, conn.pgconn.socket)

    def arm(self, fd: int) -> None:
        with self._cv:
            self._deadline, self._fd, self.fired = time.monotonic() + self.bound_s, fd, False
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="vidforge-state-watchdog", daemon=True)
                self._thread.start()
            self._cv.notify()

    def disarm(self) -> None:
        with self._cv:
            self._deadline = None

    def _watch(self) -> None:
        with self._cv:
            while True:
                if self._deadline is None:
                    self._cv.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._cv.wait(left)
                    continue
                self._deadline, self.fired = None, True
                try:  # shutdown acts on the socket itself, through a duplicate of its descriptor
                    with socket.socket(fileno=os.dup(self._fd)) as sock:
                        sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # already closed: the call has its error


class _Bounded:
    def __init__(self, watchdog: _Watchdog, fd: int) -> None:
        self._watchdog, self._fd = watchdog, fd

    def __enter__(self) -> None:
        self._watchdog.arm(self._fd)

    def __exit__(self, *exc: object) -> None:
        self._watchdog.disarm()


class PostgresTaskStore:
    """Write-through `actors.store.TaskStore` on one owning PostgreSQL session.

    The connection is in autocommit mode: a single statement commits when it returns, a write of several statements
    runs in one explicit transaction. With PostgreSQL's default ``synchronous_commit=on`` a commit has reached the
    server's WAL on disk before it returns.
    """

    def __init__(
        self,
        url: str,
        *,
        wait: bool = True,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retry_max_s: float = DEFAULT_RETRY_MAX_S,
    ) -> None:
        """Connect, take ownership (waiting while another head holds it, unless ``wait`` is False: then
        `StateOwned`), and migrate the layout. Errors name the database without its user or password."""
        self.location = public_database_url(url)
        self._url = url
        self._timeout_s = timeout_s
        self._retry_max_s = retry_max_s
        self._watchdog = _Watchdog(timeout_s)
        self._lock_key = 0
        self._closed = False
        self._down_reason: str | None = None  # why there is no session now: None while there is one
        self._backoff = Backoff(retry_max_s)
        self._generation = 1
        try:
            conn = self._connect()
        except psycopg.Error as exc:
            raise RuntimeError(f"cannot open the task state in {self.location}: {_scrubbed(exc, url)}") from None
        try:
            self._own(conn, wait)
            self._migrate(conn)
        except BaseException:
            conn.close()
            raise
        self._conn: Connection | None = conn
        self._previous_pid = conn.info.backend_pid

    def _connect(self) -> Connection:
        conn = psycopg.connect(
            self._url,
            autocommit=True,
            connect_timeout=max(2, round(self._timeout_s)),
            keepalives=1,
            keepalives_idle=10,
            keepalives_interval=5,
            keepalives_count=3,
        )
        try:
            with self._watchdog.bounded(conn):
                for name, value in _SERVER_KEEPALIVE.items():
                    conn.execute(f"SET {name} = {value}")
                # Server-side bounds too: a statement stuck behind a lock, or a transaction left open by a lost
                # client, ends on the server instead of holding rows.
                conn.execute(f"SET statement_timeout = {int(self._timeout_s * 1000)}")
                conn.execute(f"SET idle_in_transaction_session_timeout = {int(self._timeout_s * 2000)}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _own(self, conn: Connection, wait: bool, abandoned_pid: int | None = None) -> None:
        row = conn.execute("SELECT current_schema()").fetchone()
        self._lock_key = key = owner_lock_key(str(row[0]) if row else "")
        said = False
        while not self._one(conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()):
            if abandoned_pid is not None and self._end_abandoned(conn, abandoned_pid):
                continue
            if not wait:
                raise StateOwned(f"another vidforge server owns the task state in {self.location}")
            if not said:
                log.warning("vidforge: another head owns the task state in %s; waiting to take over", self.location)
                said = True
            if self._closed:
                raise StateOwned(f"closed while waiting for the task state in {self.location}")
            time.sleep(OWNER_RETRY_S)
        if said:
            log.warning("vidforge: took over the task state in %s", self.location)

    def _end_abandoned(self, conn: Connection, pid: int) -> bool:
        """This store's previous session, if it still holds the lock (the server has not noticed it is gone: a
        stalled link), is ended: nobody else can be using it. True when it was."""
        key = self._lock_key & 0xFFFFFFFFFFFFFFFF  # a bigint key is two oids in pg_locks: high, then low half
        holder = conn.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1"
            " AND classid = %s::bigint::oid AND objid = %s::bigint::oid AND pid = %s",
            (key >> 32, key & 0xFFFFFFFF, pid),
        ).fetchone()
        if holder is None:
            return False
        log.warning("vidforge: ending this head's abandoned session on %s to take the task state again", self.location)
        conn.execute("SELECT pg_terminate_backend(%s, %s)", (pid, int(self._timeout_s * 1000)))
        return True

    def _migrate(self, conn: Connection) -> None:
        """Create or bring the layout to SCHEMA_VERSION in one transaction: all of it, or none."""
        with conn.transaction():
            row = conn.execute("SELECT to_regclass('vidforge_schema') IS NOT NULL").fetchone()
            stored = conn.execute("SELECT version FROM vidforge_schema").fetchone() if self._one(row) else None
            version = int(stored[0]) if stored else None
            if version is not None and version > SCHEMA_VERSION:
                raise RuntimeError(
                    f"{self.location} holds task records of layout {version}, newer than this vidforge's"
                )
            if version == SCHEMA_VERSION:
                return
            if version is None and self._one(conn.execute("SELECT to_regclass('tasks') IS NOT NULL").fetchone()):
                raise RuntimeError(
                    f"{self.location} has a table named tasks that vidforge did not make: give vidforge a database"
                    " (or a schema, ?options=-csearch_path%3DNAME) of its own"
                )
            for statement in sql_statements(_TABLES, OUTBOX_TABLE.format(ms="BIGINT")):
                conn.execute(statement)
            if version is not None and version < 3:  # an older layout: what it lacks, and its records rewritten
                conn.execute("ALTER TABLE tasks ADD COLUMN IF NOT EXISTS retain_from_ms BIGINT")
                for task_id, record in conn.execute("SELECT task_id, record FROM tasks").fetchall():
                    rec = migrated_record(record, version)
                    conn.execute(
                        "UPDATE tasks SET record = %s, retain_from_ms = %s WHERE task_id = %s",
                        (rec.model_dump_json() if version < 2 else record, retain_from_ms(rec), task_id),
                    )
            for statement in sql_statements(_INDEXES, OUTBOX_INDEXES):
                conn.execute(statement)
            conn.execute("DELETE FROM vidforge_schema")
            conn.execute("INSERT INTO vidforge_schema (version) VALUES (%s)", (SCHEMA_VERSION,))

    @staticmethod
    def _one(row: tuple[object, ...] | None) -> bool:
        return bool(row and row[0])

    # -- the session, and getting it back --------------------------------------------------------------------------

    def session(self) -> int:
        """The number of the session calls go through now (a new one after each reconnection); `StateUnavailable`
        while there is none."""
        if self._conn is None:
            raise self._unavailable()
        return self._generation

    def unavailable_reason(self) -> str | None:
        """Why the state cannot be reached now; None while it can."""
        return self._down_reason

    def probe(self) -> None:
        self._session(lambda conn: conn.execute("SELECT 1").fetchone())

    def _unavailable(self) -> StateUnavailable:
        return StateUnavailable(
            f"{self.location}: {self._down_reason or 'no session'}; reconnecting", self._backoff.hint_ms()
        )

    def _session(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` on the owning session, bounded by ``timeout_s``. A session that broke (or hung past the
        bound, or sits on a server turned standby) is dropped and `StateUnavailable` raised while a thread gets a new
        one; a statement the server cancelled (its own timeout) is `StateUnavailable` on a session that stays."""
        conn = self._conn
        if conn is None:
            raise self._unavailable()
        try:
            with self._watchdog.bounded(conn):
                return work(conn)
        except _UNAVAILABLE as exc:
            if self._watchdog.fired:
                reason = f"no answer within {self._timeout_s:g} s (VIDFORGE_STATE_TIMEOUT_S)"
            else:
                reason = _scrubbed(exc, self._url).splitlines()[0] if str(exc).strip() else type(exc).__name__
            if conn.broken or conn.closed or self._watchdog.fired or isinstance(exc, pg_errors.ReadOnlySqlTransaction):
                self._lost(conn, reason)
                raise self._unavailable() from None
            if isinstance(exc, psycopg.OperationalError):
                raise StateUnavailable(f"{self.location}: {reason}", self._backoff.hint_ms()) from None
            raise

    def _lost(self, conn: Connection, reason: str) -> None:
        """Say so once, drop the session, and get a new one in the background."""
        if self._conn is not conn:
            return
        self._conn = None
        self._down_reason = reason
        log.warning("vidforge: lost the task state's session in %s (%s); reconnecting", self.location, reason)
        try:
            conn.close()
        except psycopg.Error:
            pass
        threading.Thread(target=self._reconnect, name="vidforge-state-reconnect", daemon=True).start()

    def _reconnect(self) -> None:
        """Until a new session owns the state: connect, take the lock again (waiting while another head holds it),
        then let calls through on it. Bounded, jittered backoff between attempts."""
        self._backoff.reset()
        said_owned = False
        while not self._closed:
            time.sleep(self._backoff.next_s())
            try:
                conn = self._connect()
            except psycopg.Error as exc:
                self._down_reason = _scrubbed(exc, self._url).splitlines()[0] or type(exc).__name__
                continue
            try:
                self._own(conn, wait=False, abandoned_pid=self._previous_pid)
            except StateOwned:
                conn.close()
                self._down_reason = "another head owns the task state"
                if not said_owned:
                    log.warning("vidforge: another head owns the task state in %s; waiting", self.location)
                    said_owned = True
                continue
            except psycopg.Error as exc:
                conn.close()
                self._down_reason = _scrubbed(exc, self._url).splitlines()[0] or type(exc).__name__
                continue
            if self._closed:
                conn.close()
                return
            self._previous_pid = conn.info.backend_pid
            self._generation += 1
            self._down_reason = None
            self._conn = conn
            log.warning("vidforge: the task state in %s answers again", self.location)
            return

    def _records(self, query: str, params: tuple[object, ...] = ()) -> list[TaskRecord]:
        rows = self._session(lambda conn: conn.execute(query, params).fetchall())
        return [TaskRecord.model_validate_json(str(record)) for (record,) in rows]

    def live_tasks(self) -> list[TaskRecord]:
        return self._records(
            "SELECT record FROM tasks WHERE status = ANY(%s) ORDER BY created_at_ms, task_id", (_LIVE_STATUSES,)
        )

    def get_task(self, task_id: str) -> TaskRecord | None:
        found = self._records("SELECT record FROM tasks WHERE task_id = %s", (task_id,))
        return found[0] if found else None

    def save_task(
        self, record: TaskRecord, *, claim_idempotency_key: bool = False, events: Sequence[OutboxEvent] = ()
    ) -> None:
        def write(conn: Connection) -> None:
            with conn.transaction():
                conn.execute(
                    f"INSERT INTO tasks ({TASK_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s)"
                    " ON CONFLICT (task_id) DO UPDATE SET (principal, status, idempotency_key, created_at_ms, record,"
                    " retain_from_ms) = (EXCLUDED.principal, EXCLUDED.status, EXCLUDED.idempotency_key,"
                    " EXCLUDED.created_at_ms, EXCLUDED.record, EXCLUDED.retain_from_ms)",
                    task_row(record),
                )
                if claim_idempotency_key:
                    conn.execute(
                        "INSERT INTO idempotency VALUES (%s, %s, %s, %s) ON CONFLICT (principal, key)"
                        " DO UPDATE SET task_id = EXCLUDED.task_id, created_at_ms = EXCLUDED.created_at_ms",
                        (record.principal, record.request.idempotency_key, record.task_id, record.created_at_ms),
                    )
                if events:
                    with conn.cursor() as cur:
                        cur.executemany(OUTBOX_INSERT, [outbox_row(event) for event in events])

        self._session(write)

    def owned_task_ids(self, principal: str, limit: int, before: tuple[int, str] | None = None) -> list[str]:
        if before is None:
            query = "SELECT task_id FROM tasks WHERE principal = %s ORDER BY created_at_ms DESC, task_id DESC LIMIT %s"
            params: tuple[object, ...] = (principal, limit)
        else:
            query = (
                "SELECT task_id FROM tasks WHERE principal = %s AND (created_at_ms, task_id) < (%s, %s)"
                " ORDER BY created_at_ms DESC, task_id DESC LIMIT %s"
            )
            params = (principal, *before, limit)
        return [str(task_id) for (task_id,) in self._session(lambda conn: conn.execute(query, params).fetchall())]

    def expired_tasks(self, retained_from_before_ms: int, limit: int) -> list[TaskRecord]:
        return self._records(
            "SELECT record FROM tasks WHERE retain_from_ms <= %s ORDER BY retain_from_ms, task_id LIMIT %s",
            (retained_from_before_ms, limit),
        )

    def delete_tasks(self, task_ids: list[str]) -> None:
        """One transaction for a whole sweep batch."""

        def delete(conn: Connection) -> None:
            with conn.transaction():
                conn.execute("DELETE FROM tasks WHERE task_id = ANY(%s)", (task_ids,))
                conn.execute("DELETE FROM idempotency WHERE task_id = ANY(%s)", (task_ids,))

        self._session(delete)

    def find_idempotent(self, principal: str, key: str, claimed_after_ms: int) -> str | None:
        row = self._session(
            lambda conn: conn.execute(
                "SELECT task_id FROM idempotency WHERE principal = %s AND key = %s AND created_at_ms > %s",
                (principal, key, claimed_after_ms),
            ).fetchone()
        )
        return str(row[0]) if row else None

    def drop_idempotency(self, claimed_at_or_before_ms: int) -> int:
        return self._session(
            lambda conn: (
                conn.execute("DELETE FROM idempotency WHERE created_at_ms <= %s", (claimed_at_or_before_ms,)).rowcount
            )
        )

    def known_task_ids(self, task_ids: Iterable[str]) -> set[str]:
        ids = list(task_ids)
        rows = self._session(
            lambda conn: conn.execute("SELECT task_id FROM tasks WHERE task_id = ANY(%s)", (ids,)).fetchall()
        )
        return {str(task_id) for (task_id,) in rows}

    def count_tasks(self) -> int:
        row = self._session(lambda conn: conn.execute("SELECT count(*) FROM tasks").fetchone())
        return int(str(row[0])) if row else 0

    def count_finished(self) -> dict[TaskStatus, int]:
        rows = self._session(
            lambda conn: conn.execute(
                "SELECT status, count(*) FROM tasks WHERE status = ANY(%s) GROUP BY status", (_TERMINAL_STATUSES,)
            ).fetchall()
        )
        return {TaskStatus(str(status)): int(str(count)) for status, count in rows}

    def webhooks_due(self, now_ms: int, limit: int, lease_until_ms: int) -> list[Delivery]:
        """Rows another session holds (a second dispatcher's lease being written) are skipped, not waited for."""
        rows = self._session(
            lambda conn: conn.execute(
                f"WITH due AS (SELECT event_id, next_attempt_at_ms AS was FROM webhook_outbox WHERE {DUE_CONDITION}"
                " FOR UPDATE SKIP LOCKED) UPDATE webhook_outbox AS o SET next_attempt_at_ms = %s FROM due"
                f" WHERE o.event_id = due.event_id RETURNING due.was, o.event_id,"
                f" {', '.join('o.' + name.strip() for name in DELIVERY_COLUMNS.split(','))}",
                (now_ms, limit, lease_until_ms),
            ).fetchall()
        )
        # RETURNING has no order, and holds the lease: each as it was due, oldest first.
        rows.sort(key=lambda row: (int(str(row[0])), str(row[1])))
        return [delivery_of((*row[2:5], row[0], *row[6:])) for row in rows]

    def record_webhook_attempt(self, event_id: str, attempt: Attempt) -> None:
        self._session(lambda conn: conn.execute(RECORD_ATTEMPT, attempt_row(event_id, attempt)))

    def list_webhook_deliveries(
        self, principal: str, limit: int, before: tuple[int, str] | None = None
    ) -> list[Delivery]:
        query, params = list_deliveries_query(principal, limit, before)
        return [delivery_of(row) for row in self._session(lambda conn: conn.execute(query, params).fetchall())]

    def webhook_backlog(self) -> Backlog:
        row = self._session(lambda conn: conn.execute(BACKLOG).fetchone())
        count, oldest, next_due = row if row else (0, None, None)
        return Backlog(
            pending=int(str(count)),
            oldest_created_at_ms=None if oldest is None else int(str(oldest)),
            next_due_at_ms=None if next_due is None else int(str(next_due)),
        )

    def drop_webhook_deliveries(self, created_at_or_before_ms: int, limit: int) -> int:
        return self._session(lambda conn: conn.execute(DROP_SETTLED, (created_at_or_before_ms, limit)).rowcount)

    def import_rows(
        self,
        tasks: Iterable[TaskRow],
        keys: Iterable[KeyRow],
        outbox: Iterable[tuple[object, ...]] = (),
        *,
        replace: bool,
    ) -> tuple[int, int, int]:
        """Copy another store's task rows (``TASK_COLUMNS``), idempotency rows (``KEY_COLUMNS``) and webhook outbox
        rows (``OUTBOX_COLUMNS``: pending deliveries go on from where they were) into this one, in one transaction
        (all or nothing); with ``replace``, what this store held goes in the same transaction. Returns the counts."""
        tables = (
            ("tasks", TASK_COLUMNS, tasks),
            ("idempotency", KEY_COLUMNS, keys),
            ("webhook_outbox", OUTBOX_COLUMNS, outbox),
        )
        counts = [0, 0, 0]

        def copy(conn: Connection) -> None:
            with conn.transaction():
                if replace:
                    for table, _, _ in tables:
                        conn.execute(f"DELETE FROM {table}")
                with conn.cursor() as cur:
                    for index, (table, columns, rows) in enumerate(tables):
                        with cur.copy(f"COPY {table} ({columns}) FROM STDIN") as copying:
                            for row in rows:
                                copying.write_row(row)
                                counts[index] += 1

        self._session(copy)
        # A bulk load leaves the tables without planner statistics and their visibility map unset until autovacuum
        # comes round; meanwhile the next start's count of the finished records reads every row's heap page instead
        # of the status index alone (1.1 s instead of 0.07 s at a million records).
        self._session(lambda conn: conn.execute("VACUUM (ANALYZE) tasks, idempotency, webhook_outbox"))
        return counts[0], counts[1], counts[2]

    def close(self) -> None:
        """Close the session, which lets go of the ownership lock: a waiting head takes over within a second."""
        self._closed = True
        if self._conn is not None:
            self._conn.close()


def _scrubbed(exc: Exception, url: str) -> str:
    """The driver's message with the URL and its password taken out, should the driver have echoed any of them."""
    parts = urlsplit(url)
    secrets = [url, parts.password, *parse_qs(parts.query).get("password", [])]
    text = str(exc).strip()
    for secret in filter(None, secrets):
        text = text.replace(secret, "***").replace(unquote(secret), "***")
    return text
