"""A real PostgreSQL server for the tests: Debian's ``initdb`` and ``pg_ctl`` in a temporary dir, on a free loopback
port, with password (SCRAM) authentication, one per test process.

PostgreSQL refuses to run as root, and CI runs as root: there the server runs as a system user of its own
(``vidforge-pg``, created when missing) through ``runuser``. ``postgres_url`` (session-scoped) is the server's
superuser URL; ``state_url`` a fresh, empty database on it for one test. Import both into a test module.
"""

from __future__ import annotations

import atexit
import os
import pwd
import secrets
import shutil
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
    """One server process in its own temporary dir; ``stop`` ends it and removes the dir."""

    def __init__(self) -> None:
        self.bin = _bin_dir()
        self.password = secrets.token_urlsafe(16)
        self.port = _free_port()
        self.root = Path(tempfile.mkdtemp(prefix="vidforge-pg-"))
        self.as_root = os.geteuid() == 0
        if self.as_root:
            if subprocess.run(["id", "-u", RUN_AS], capture_output=True).returncode != 0:
                subprocess.run(["useradd", "--system", "--no-create-home", RUN_AS], check=True, capture_output=True)
            entry = pwd.getpwnam(RUN_AS)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self.data = self.root / "data"
        pwfile = self.root / "pwfile"
        pwfile.write_text(self.password)
        if self.as_root:
            os.chown(pwfile, pwd.getpwnam(RUN_AS).pw_uid, -1)
        self._run(
            "initdb", "-D", str(self.data), "-U", USER, "--auth=scram-sha-256", f"--pwfile={pwfile}", "-E", "UTF8"
        )
        pwfile.unlink()
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.root / "server.log"), "-w", "start")
        self.url = f"postgresql://{USER}:{self.password}@127.0.0.1:{self.port}/postgres"

    def _run(self, program: str, *args: str) -> None:
        command = [str(self.bin / program), *args]
        if self.as_root:
            command = ["runuser", "-u", RUN_AS, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, cwd=self.root)
        if done.returncode != 0:
            raise RuntimeError(f"{program} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")

    def new_database(self) -> str:
        """The URL of a new, empty database on this server."""
        name = f"vf_{secrets.token_hex(6)}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return database_url(self.url, name)

    def stop(self) -> None:
        if self.data.exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


def database_url(url: str, name: str) -> str:
    """``url`` naming database ``name`` instead."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


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
