"""`vidforge state migrate --to postgresql://…`: move the registry's records from the state dir's SQLite file into
PostgreSQL, so that the next `vidforge serve` (with VIDFORGE_STATE_URL set) keeps every task and idempotency key.

Run it with the server stopped. The SQLite file is only read (after the migration on open that any server start
would make) and stays as it was: a backup. The copy is one transaction: the database holds all of it or none.
A database that already holds tasks is refused unless ``--force``, which replaces them in that same transaction.
"""

from __future__ import annotations

import argparse
import fcntl
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

# The store modules (pydantic models, the driver) are imported by the command that runs them: `vidforge --help` and
# the client's commands answer without them.

READ_BATCH = 1000  # rows read from SQLite at a time: the copy streams, whatever the registry's size
# SQLite's WAL index (the -shm file): every connection holds a shared lock on this byte while it is open, and the
# last one to close takes it exclusively (https://sqlite.org/walformat.html, "the DMS lock").
_SHM_DMS_BYTE = 128


class Migrated(NamedTuple):
    database: Path  # the SQLite file copied from
    tasks: int
    keys: int  # idempotency keys
    deliveries: int  # webhook outbox rows, pending or settled


class MigrateRefused(Exception):
    """Why the migration did not start; nothing was written."""


def sqlite_in_use(database: Path) -> bool:
    """Whether another process has the SQLite database open (a server's registry, idle or not)."""
    shm = database.with_name(database.name + "-shm")
    try:
        handle = shm.open("rb+")
    except FileNotFoundError:  # WAL mode keeps it while any connection is open
        return False
    with handle:
        try:
            fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, _SHM_DMS_BYTE)
        except OSError:
            return True
        fcntl.lockf(handle, fcntl.LOCK_UN, 1, _SHM_DMS_BYTE)
        return False


def _rows(conn: sqlite3.Connection, query: str) -> Iterator[Any]:
    cursor = conn.execute(query)
    while batch := cursor.fetchmany(READ_BATCH):
        yield from batch


def migrate(state_dir: str, url: str, *, force: bool) -> Migrated:
    """Copy every task record, idempotency key and webhook delivery from the SQLite registry in ``state_dir`` into the database at
    ``url``; returns what it copied. `MigrateRefused` when it must not run (nothing written)."""
    from actors.postgres_store import KEY_COLUMNS, PostgresTaskStore, StateOwned
    from actors.sqlite_store import SqliteTaskStore
    from actors.store import OUTBOX_COLUMNS, TASK_COLUMNS

    database = Path(state_dir) / SqliteTaskStore.FILENAME
    if not database.is_file():
        raise MigrateRefused(f"no SQLite registry at {database} (VIDFORGE_STATE_DIR or --data-dir names its folder)")
    if sqlite_in_use(database):
        raise MigrateRefused(f"{database} is open in another process: stop vidforge serve first")
    SqliteTaskStore(state_dir).close()  # brings an older layout to this one, as the server would
    try:
        target = PostgresTaskStore(url, wait=False)
    except StateOwned as exc:
        raise MigrateRefused(f"{exc}: stop it first") from None
    try:
        held = target.count_tasks()
        if held and not force:
            raise MigrateRefused(
                f"{target.location} already holds {held} tasks: --force replaces them with the SQLite registry's"
            )
        source = sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True)
        try:
            tasks = _rows(source, f"SELECT {TASK_COLUMNS} FROM tasks ORDER BY created_at_ms, task_id")
            keys = _rows(source, f"SELECT {KEY_COLUMNS} FROM idempotency")
            outbox = _rows(source, f"SELECT {OUTBOX_COLUMNS} FROM webhook_outbox")
            return Migrated(database, *target.import_rows(tasks, keys, outbox, replace=force))
        finally:
            source.close()
    finally:
        target.close()


def run(args: argparse.Namespace) -> int:
    """The command: validate the URL as the server would, migrate, and say what to do next."""
    from pydantic import ValidationError

    from actors.settings import public_database_url
    from serve_app._config import Config

    try:
        config = Config.from_env(data_dir=args.data_dir, state_url=args.to)
    except ValidationError as exc:
        print(f"vidforge: {exc.errors()[0]['msg'].removeprefix('Value error, ')}", file=sys.stderr)
        return 2
    if config.state_url is None:
        print("vidforge: name the database: --to postgresql://… (or VIDFORGE_STATE_URL)", file=sys.stderr)
        return 2
    state_dir = config.state_dir or config.data_dir
    try:
        done = migrate(state_dir, config.state_url, force=args.force)
    except (MigrateRefused, RuntimeError) as exc:
        print(f"vidforge: {exc}", file=sys.stderr)
        return 2
    location = public_database_url(config.state_url)
    print(
        f"vidforge: copied {done.tasks} tasks, {done.keys} idempotency keys and {done.deliveries} webhook deliveries"
        f" from {done.database} to {location}"
    )
    print(
        "vidforge: next, start vidforge serve with VIDFORGE_STATE_URL set to that URL (keep it a secret: from a"
        " secret store, not a command line); the SQLite file is left as it was"
    )
    return 0


def register_state_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`vidforge state migrate` on the CLI's subcommands."""
    state = sub.add_parser("state", help="manage the registry's state").add_subparsers(
        dest="state_command", required=True
    )
    move = state.add_parser(
        "migrate", help="copy the SQLite registry's tasks, idempotency keys and webhook deliveries into PostgreSQL"
    )
    move.add_argument(
        "--to", default=None, help="postgresql://USER:PASSWORD@HOST:PORT/DB (default: $VIDFORGE_STATE_URL)"
    )
    move.add_argument(
        "--data-dir", default=None, help="default: $VIDFORGE_DATA_DIR or .vidforge (the state dir's fallback)"
    )
    move.add_argument("--force", action="store_true", help="replace the tasks the database already holds")
    move.set_defaults(func=run)
