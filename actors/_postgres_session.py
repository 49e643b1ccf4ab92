"""The one PostgreSQL session through which a head reads and writes its task state, and getting it back.

Ownership is a session-level advisory lock, keyed by the schema the tables live in, taken on this session (waiting,
saying so once, while another head holds it). Every call is bounded by ``timeout_s``: libpq's connect timeout, the
server's statement timeout, TCP keepalives both ways, and a watchdog that shuts the socket of a call past its bound
(a server that accepted the connection and stopped answering is reached by nothing else). A broken, hung or
read-only session is dropped: calls answer `StateUnavailable` at once while a thread connects again with jittered
backoff, takes the lock again (ending this head's own abandoned session if a stalled link left it holding the lock)
and only then lets calls through. Each new session has a new number (`session()`).
"""

import contextlib
import hashlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import TupleRow

from actors.backoff import Backoff
from actors.errors import StateOwned
from actors.settings import public_database_url
from mcp_protocol.state_outage import StateUnavailable

log = logging.getLogger("actors.postgres_store")  # the store's log: what an operator greps for
T = TypeVar("T")
Connection = psycopg.Connection[TupleRow]

OWNER_RETRY_S = 1.0  # how often a waiting head asks for the lock again
# Keepalives on the owning session, both ways (the client's are connect()'s keepalives_* below): a head cut off from
# the database (its node lost, not just its process) lets go of the lock within about idle + interval x count seconds
# instead of the kernel's two hours, and this side notices a silent peer as soon.
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
        self._closed = False
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def bounded(self, conn: Connection) -> Iterator[None]:
        """The block is one call on ``conn``: its socket is shut down if the block outlasts the bound."""
        with self._cv:
            self._deadline, self._fd, self.fired = time.monotonic() + self.bound_s, conn.pgconn.socket, False
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="vidforge-state-watchdog", daemon=True)
                self._thread.start()
            self._cv.notify()
        try:
            yield
        finally:
            with self._cv:
                self._deadline = None

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify()

    def _watch(self) -> None:
        with self._cv:
            while not self._closed:
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


class OwningSession:
    """The session that owns the task state in ``url``; ``run`` calls go through it."""

    def __init__(self, url: str, *, wait: bool, timeout_s: float, retry_max_s: float) -> None:
        """Connect and take ownership (waiting while another head holds it, unless ``wait`` is False: then
        `StateOwned`). Errors name the database without its user or password."""
        self.location = public_database_url(url)
        self._url = url
        self._timeout_s = timeout_s
        self._watchdog = _Watchdog(timeout_s)
        self._lock_key = 0
        self._closed = False
        self._down_reason: str | None = None  # why there is no session now: None while there is one
        self._backoff = Backoff(retry_max_s)
        self._generation = 1
        try:
            conn = self.connect()
        except psycopg.Error as exc:
            raise RuntimeError(f"cannot open the task state in {self.location}: {_scrubbed(exc, url)}") from None
        try:
            self.own(conn, wait)
        except BaseException:
            conn.close()
            raise
        self._conn: Connection | None = conn
        self._previous_pid = conn.info.backend_pid

    @property
    def first_connection(self) -> Connection:
        """The connection taken at construction (for the layout's migration, before any call)."""
        assert self._conn is not None
        return self._conn

    def connect(self) -> Connection:
        """A new connection with this session's bounds (not yet owning the state)."""
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

    def own(self, conn: Connection, wait: bool, abandoned_pid: int | None = None) -> None:
        row = conn.execute("SELECT current_schema()").fetchone()
        self._lock_key = key = owner_lock_key(str(row[0]) if row else "")
        said = False
        while not _true(conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()):
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

    def session(self) -> int:
        """The number of the session calls go through now (a new one after each reconnection); `StateUnavailable`
        while there is none."""
        if self._conn is None:
            raise self._unavailable()
        return self._generation

    def unavailable_reason(self) -> str | None:
        """Why the state cannot be reached now; None while it can."""
        return self._down_reason

    def _unavailable(self) -> StateUnavailable:
        return StateUnavailable(
            f"{self.location}: {self._down_reason or 'no session'}; reconnecting", self._backoff.hint_ms()
        )

    def run(self, work: Callable[[Connection], T]) -> T:
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
                conn = self.connect()
            except psycopg.Error as exc:
                self._down_reason = _scrubbed(exc, self._url).splitlines()[0] or type(exc).__name__
                continue
            try:
                self.own(conn, wait=False, abandoned_pid=self._previous_pid)
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

    def close(self) -> None:
        """Close the session, which lets go of the ownership lock: a waiting head takes over within a second."""
        self._closed = True
        if self._conn is not None:
            self._conn.close()
        self._watchdog.close()


def _true(row: tuple[object, ...] | None) -> bool:
    return bool(row and row[0])


def _scrubbed(exc: Exception, url: str) -> str:
    """The driver's message with the URL and its password taken out, should the driver have echoed any of them."""
    parts = urlsplit(url)
    secrets = [url, parts.password, *parse_qs(parts.query).get("password", [])]
    text = str(exc).strip()
    for secret in filter(None, secrets):
        text = text.replace(secret, "***").replace(unquote(secret), "***")
    return text
