"""A real PostgreSQL server for the tests: Debian's ``initdb`` and ``pg_ctl`` in a temporary dir, on a free loopback
port, with password (SCRAM) authentication, one per test process.

PostgreSQL refuses to run as root, and CI runs as root: there the server runs as a system user of its own
(``vidforge-pg``, created when missing) through ``runuser``. ``postgres_url`` (session-scoped) is the server's
superuser URL; ``state_url`` a fresh, empty database on it for one test. Import both into a test module.

The fault tests start servers of their own: ``PostgresServer`` stops, restarts and kills one keeping its data,
``PostgresServer.standby_of`` makes a streaming hot standby of one (``promote`` makes it a primary), and
``multi_host_url`` names a primary and its standby for libpq to connect to whichever takes writes.
"""

from __future__ import annotations

import atexit
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from glob import glob
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from tests.harness import KILL_TIMEOUT_S, wait_until

RUN_AS = "vidforge-pg"  # the server's user when the tests run as root
USER = "vidforge"  # the database superuser the tests connect as


def _bin_dir() -> Path:
    found = sorted(glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if not found:
        raise RuntimeError(
            "PostgreSQL's server binaries (/usr/lib/postgresql/*/bin/initdb) are missing: the state-store tests need"
            " a real server. Install Debian's `postgresql` package (apt-get install postgresql)."
        )
    return Path(found[-1]).parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PostgresServer:
    """One server process in its own temporary dir; ``stop`` ends it and removes the dir. ``stop_server``,
    ``start_server`` and ``kill`` stop, restart and crash it keeping its data and port, for the fault tests."""

    def __init__(self) -> None:
        self._prepare(secrets.token_urlsafe(16))
        pwfile = self.root / "pwfile"
        pwfile.write_text(self.password)
        if self.as_root:
            os.chown(pwfile, pwd.getpwnam(RUN_AS).pw_uid, -1)
        self._run(
            *("initdb", "-D", str(self.data), "-U", USER, "--auth=scram-sha-256"),
            *(f"--pwfile={pwfile}", "-E", "UTF8", "--no-sync"),  # no sync: see start_server
        )
        pwfile.unlink()
        self.start_server()

    @classmethod
    def standby_of(cls, primary: PostgresServer) -> PostgresServer:
        """A hot standby streaming from ``primary`` (a base backup of it, on a port of its own), running. Same
        superuser and password: the backup copies them."""
        standby = cls.__new__(cls)
        standby._prepare(primary.password)
        standby._run(
            "pg_basebackup",
            *("-D", str(standby.data), "-R", "-X", "stream", "-c", "fast"),  # fast: no wait for a spread checkpoint
            *("-h", "127.0.0.1", "-p", str(primary.port), "-U", USER, "-w"),
            env={"PGPASSWORD": primary.password},
        )
        standby.start_server()
        return standby

    def _prepare(self, password: str) -> None:
        """What every server has before its data dir: a root dir its user owns, a free port, its URL."""
        self.bin = _bin_dir()
        self.password = password
        self.port = _free_port()
        self.root = Path(tempfile.mkdtemp(prefix="vidforge-pg-"))
        self.as_root = os.geteuid() == 0
        if self.as_root:
            if subprocess.run(["id", "-u", RUN_AS], capture_output=True).returncode != 0:
                subprocess.run(["useradd", "--system", "--no-create-home", RUN_AS], check=True, capture_output=True)
            entry = pwd.getpwnam(RUN_AS)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self.data = self.root / "data"
        self.running = False
        self.url = f"postgresql://{USER}:{self.password}@127.0.0.1:{self.port}/postgres"

    def _run(self, program: str, *args: str, env: dict[str, str] | None = None) -> None:
        command = [str(self.bin / program), *args]
        if self.as_root:
            command = ["runuser", "-u", RUN_AS, "--", *command]
        done = subprocess.run(
            command, capture_output=True, text=True, cwd=self.root, env=None if env is None else {**os.environ, **env}
        )
        if done.returncode != 0:
            raise RuntimeError(f"{program} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")

    def start_server(self) -> None:
        """Start the server on its data dir and port and wait until it accepts connections (after a ``kill``, once
        PostgreSQL's crash recovery is done)."""
        # fsync off: a killed server's writes are in the kernel's page cache and survive it (the fault tests kill
        # processes, never the machine), and a test's CREATE DATABASE and commits need not wait for the disk.
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.root / "server.log"), "-w", "start")
        self.running = True

    def stop_server(self, mode: str = "immediate") -> None:
        """Stop the server (``pg_ctl -m mode``: smart, fast or immediate), keeping its data dir and port."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "stop")
        self.running = False

    def kill(self) -> None:
        """SIGKILL the postmaster, as a crash would, and wait until its port refuses connections and the processes
        it had started are gone (they end on their own when it dies; the next start needs their shared memory
        released). ``start_server`` then starts it with PostgreSQL's crash recovery."""
        pid = int((self.data / "postmaster.pid").read_text().splitlines()[0])
        os.kill(pid, signal.SIGKILL)
        self.running = False
        wait_until(lambda: not self._accepts(), KILL_TIMEOUT_S, 0.05, f"port {self.port} to refuse connections")
        wait_until(lambda: not self._processes(), KILL_TIMEOUT_S, 0.05, f"the processes of {self.data} to end")
        if Path(f"/proc/{pid}").exists():
            # A zombie its parent (pid 1, past pg_ctl) has not reaped yet: a start would take the pid in the lock
            # files for a live server and refuse.
            (self.data / "postmaster.pid").unlink()
            (self.root / f".s.PGSQL.{self.port}.lock").unlink()

    def _accepts(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
        except OSError:
            return False
        return True

    def _processes(self) -> list[int]:
        """The processes working in the data dir (every server process does)."""
        data, found = self.data.resolve(), []
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and (entry / "cwd").readlink() == data:
                    found.append(int(entry.name))
            except OSError:
                continue  # gone meanwhile, or not ours to look at
        return found

    def promote(self) -> None:
        """Make this standby a primary, and wait until it takes writes."""
        self._run("pg_ctl", "-D", str(self.data), "-w", "promote")

    def wait_caught_up(self, primary: PostgresServer, timeout: float = 30) -> None:
        """Wait until this standby has replayed ``primary``'s WAL up to where it is now (every commit so far)."""
        with psycopg.connect(primary.url, autocommit=True) as conn:
            (target,) = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        with psycopg.connect(self.url, autocommit=True) as conn:

            def replayed() -> bool:
                return conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,)).fetchone() == (True,)

            wait_until(replayed, timeout, 0.05, f"the standby on port {self.port} to replay {target}")

    def new_database(self) -> str:
        """The URL of a new, empty database on this server."""
        name = f"vf_{secrets.token_hex(6)}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return database_url(self.url, name)

    def stop(self) -> None:
        if self.running:
            self.stop_server()
        shutil.rmtree(self.root, ignore_errors=True)


def database_url(url: str, name: str) -> str:
    """``url`` naming database ``name`` instead."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


def multi_host_url(primary: PostgresServer, standby: PostgresServer, dbname: str) -> str:
    """A URL naming both servers that connects to whichever takes writes (libpq tries them in order)."""
    hosts = f"127.0.0.1:{primary.port},127.0.0.1:{standby.port}"
    return f"postgresql://{USER}:{primary.password}@{hosts}/{dbname}?target_session_attrs=read-write"


_server: PostgresServer | None = None


def postgres_server() -> PostgresServer:
    """This process's server, started on first use and stopped when the process exits."""
    global _server
    if _server is None:
        _server = PostgresServer()
        atexit.register(_server.stop)
    return _server


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """The test server's superuser URL (password included)."""
    return postgres_server().url


@pytest.fixture
def state_url(postgres_url: str) -> Iterator[str]:
    """A fresh, empty database for one test."""
    yield postgres_server().new_database()


_HOLD = """
import importlib, sys, time
module, name = sys.argv[1].rsplit(".", 1)
store = getattr(importlib.import_module(module), name)(sys.argv[2])
print("open", flush=True)
time.sleep(600)
"""


@contextmanager
def store_held_open(store_class: str, where: str) -> Iterator[subprocess.Popen[str]]:
    """Another process that has opened the task store ``store_class`` (its dotted name) on ``where`` and holds it
    open — a server's registry, as far as the store can tell — until the block ends or the test kills it."""
    repo = Path(__file__).resolve().parent.parent
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, store_class, where], cwd=repo, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "open\n"
        yield holder
    finally:
        holder.kill()
        holder.wait()
