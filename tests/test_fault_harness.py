"""The fault tests' harness does what they rely on: a PostgreSQL server (tests/postgres.py) stopped and started, or
killed and started, keeps its committed rows; a standby replays the primary's commits and takes writes once promoted,
and a multi-host URL finds whichever server takes writes; the stall proxy (tests/stall_proxy.py) holds every byte
while stalled, delivers them on resume, and cuts connections."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from tests import postgres
from tests.postgres import PostgresServer, multi_host_url
from tests.stall_proxy import StallProxy

postgres_url, state_url = postgres.postgres_url, postgres.state_url  # the real server's fixtures

pytestmark = pytest.mark.slow  # starts PostgreSQL servers

SSL_REQUEST = struct.pack("!ii", 8, 80877103)  # a client's first message; a server without SSL answers b"N"


@pytest.fixture
def server() -> Iterator[PostgresServer]:
    """A server of the test's own, to stop, kill or replicate."""
    server = PostgresServer()
    yield server
    server.stop()


@pytest.fixture
def standby(server: PostgresServer) -> Iterator[PostgresServer]:
    standby = PostgresServer.standby_of(server)
    yield standby
    standby.stop()


def values(url: str) -> list[int]:
    with psycopg.connect(url) as conn:
        return [x for (x,) in conn.execute("SELECT x FROM t ORDER BY x")]


def make_table(url: str) -> None:
    """Table ``t`` holding the committed row 1."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (x int)")
        conn.execute("INSERT INTO t VALUES (1)")


class Call:
    """``fn()`` on a daemon thread of its own: ``done`` is set once it returned or raised, ``outcome`` is which."""

    def __init__(self, fn: Callable[[], object]) -> None:
        self.done = threading.Event()
        self.outcome: object = None
        threading.Thread(target=self._run, args=(fn,), daemon=True).start()

    def _run(self, fn: Callable[[], object]) -> None:
        try:
            self.outcome = fn()
        except Exception as error:
            self.outcome = error
        finally:
            self.done.set()


def through(url: str, proxy: StallProxy) -> str:
    """``url`` by way of ``proxy``."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{parts.username}:{parts.password}@127.0.0.1:{proxy.port}"))


def test_a_stopped_server_starts_again_with_its_data(server):
    make_table(server.url)
    server.stop_server()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(server.url)
    server.start_server()
    assert values(server.url) == [1]


def test_a_killed_server_starts_again_with_its_committed_rows_only(server):
    make_table(server.url)
    with psycopg.connect(server.url) as open_transaction:
        open_transaction.execute("INSERT INTO t VALUES (2)")
        server.kill()
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(server.url)
        with pytest.raises(psycopg.OperationalError):
            open_transaction.commit()
    server.start_server()  # crash recovery
    assert values(server.url) == [1]


def test_a_standby_replays_commits_and_takes_writes_once_promoted(server, standby):
    make_table(server.url)
    standby.wait_caught_up(server)
    assert values(standby.url) == [1]
    with psycopg.connect(standby.url) as conn, pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        conn.execute("INSERT INTO t VALUES (2)")
    with psycopg.connect(multi_host_url(standby, server, "postgres")) as conn:
        assert conn.info.port == server.port  # the standby, named first, is read-only: passed over

    url = multi_host_url(server, standby, "postgres")
    server.stop_server()
    standby.promote()
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.info.port == standby.port
        conn.execute("INSERT INTO t VALUES (2)")
    assert values(standby.url) == [1, 2]


def test_the_stall_proxy_holds_every_byte_until_resumed_then_ends_its_threads(state_url):
    with StallProxy(postgres.postgres_server().port) as proxy:
        with psycopg.connect(through(state_url, proxy), autocommit=True) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
            proxy.stall()
            query = Call(lambda: conn.execute("SELECT 2").fetchone())
            with socket.create_connection(("127.0.0.1", proxy.port)) as new:
                new.sendall(SSL_REQUEST)
                new.settimeout(0.5)
                with pytest.raises(TimeoutError):
                    new.recv(1)  # accepted, and nothing comes back
                assert not query.done.wait(0.5)
                proxy.resume()
                assert query.done.wait(10) and query.outcome == (2,)
                new.settimeout(10)
                assert new.recv(1) == b"N"  # held, then delivered
    assert not [thread for thread in threading.enumerate() if thread.name == f"stall-proxy-{proxy.port}"]


def test_the_stall_proxy_cuts_open_connections_stalled_or_not_and_takes_new_ones(state_url):
    with StallProxy(postgres.postgres_server().port) as proxy:
        url = through(state_url, proxy)
        with psycopg.connect(url, autocommit=True) as idle, psycopg.connect(url, autocommit=True) as waiting:
            proxy.stall()
            query = Call(lambda: waiting.execute("SELECT 1").fetchone())
            assert not query.done.wait(0.5)
            proxy.cut()
            assert query.done.wait(10) and isinstance(query.outcome, psycopg.OperationalError)
            proxy.resume()
            with pytest.raises(psycopg.OperationalError):
                idle.execute("SELECT 1")
        with psycopg.connect(url, autocommit=True) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
