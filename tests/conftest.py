"""Shared pytest configuration, and the two `vidforge serve` processes the end-to-end modules share.

A server start costs 15-30 s on a loaded 2-core machine, so every module whose checks hold on the shared
settings uses one of two session-scoped servers instead of starting its own (in `make test`, on the one worker
that runs all of those modules; see below):

- `shared_server`: bearer tokens. Its tokens file is the union of the `TOKENS` of the modules that use it, and
  no principal may belong to two modules, so quotas, idempotency keys and isolation checks stay per module.
- `open_server`: no tokens file (loopback, unauthenticated), for clients that send no credentials.

Both run with a 0.5 s poll hint (clients that honour it finish sooner) and a 4 MiB inline-resource limit, and
may import by URL from the session's `media_origin` on 127.0.0.1 (trusting its test CA: `importing_env`);
`shared_server` also lists one operator origin (`SHARED_ALLOWED_ORIGIN`). Modules that need other settings,
restarts or kills start their own `tests.harness.ServerProcess`. (One exception: tests/test_mcp_wire.py restarts
`open_server`, as a stop on SIGTERM and a fresh start; the modules after it get the restarted server.) Servers a
fixture started end with a SIGKILL of their whole session (`ServerProcess.kill`, well under a second where the
graceful stop takes ~8 s): the tests that check the graceful stop call `ServerProcess.stop` themselves.

How `make test`'s two workers share the files (`-n 2 --dist loadfile`): as xdist's loadfile, a file at a time, with
two changes (`pytest_xdist_make_scheduler` below). The modules on the shared servers go to one worker together
(`SHARED_SERVER_MODULES`), so the lane starts each shared server once instead of once per worker, and stops them
once the last of those modules has run (`pytest_runtest_teardown`) rather than at the session's end. And the work
goes out longest first (`MODULE_SECONDS`; xdist's own order is by test count, which sent the one-test files such
as the chaos run last, to run alone at the end), so the two workers finish together.

The fast lane (`make test-fast`) is every test not marked `slow` or `ray`: a test that starts Ray or a server
without the mark fails (tests/lanes.py). Async tests are `@pytest.mark.anyio`, on asyncio (`anyio_backend`).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from tests import lanes
from tests.harness import SHARED_ALLOWED_ORIGIN, SHARED_ENV, ServerProcess
from tests.https_origin import CertificateAuthority, Origin

# The modules that use `shared_server` or `open_server` (checked at collection: a module missing here still
# passes, on a shared server of its worker's own).
SHARED_SERVER_MODULES = frozenset(
    {
        "test_cli_render",
        "test_connect",
        "test_docs",
        "test_examples",
        "test_fuzz",
        "test_idempotency",
        "test_import_url",
        "test_legacy_clients",
        "test_live_progress",
        "test_mcp_app_live",
        "test_progress_cadence",
        "test_mcp_wire",
        "test_metrics_privacy",
        "test_quality_live",
        "test_streaming_live",
        "test_node_clients",
        "test_origin",
        "test_real_world_renders",
        "test_review_page",
        "test_task_lifecycle",
        "test_text_limits",
        "test_uri_ids",
        "test_upload_errors",
    }
)
SHARED_SERVERS = "shared servers"  # their work unit's name
# What each module takes in the two-worker lane, in summed test seconds (setup, call and teardown of its tests in
# a measured run on a loaded 2-core machine, rounded). Only the order matters; a module not listed comes last.
MODULE_SECONDS = {
    "test_chaos": 195,
    "test_cluster": 235,
    "test_ingress_limits": 115,
    "test_recovery": 180,
    "test_ray_failfast": 120,
    "test_storage_hygiene": 75,
    "test_s3_backend": 50,
    "test_watch_page": 35,
    "test_direct_transfers": 50,
    "test_media_limits": 85,
    "test_render_driver": 150,
    "test_storage_faults": 50,
    "test_private_files": 55,
    "test_oauth": 45,
    "test_no_stuck_task": 30,
    "test_gpu_decode": 35,
    "test_operator_interface": 25,
    "test_s3_storage": 10,
    "test_real_world_media": 15,
    "test_render_kernels": 25,
    "test_pathological_media": 15,
    "test_fast_wire": 10,
    "test_task_registry": 20,
    "test_head_loss": 140,
    "test_two_heads": 80,
    "test_state_migrate": 15,
    "test_postgres_store": 5,
    "test_state_outage_live": 150,
    "test_state_outage": 15,
    "test_fault_harness": 10,
    "test_state_outage_wire": 5,
    "test_webhooks": 25,
    "test_webhooks_live": 135,
    "test_webhook_metadata": 5,
    "test_registry_working_set": 5,
    "test_warm_pool": 80,
    "test_slow_clients": 65,
    # on the shared servers
    "test_task_lifecycle": 110,
    "test_mcp_wire": 45,
    "test_real_world_renders": 75,
    "test_legacy_clients": 95,
    "test_live_progress": 95,
    "test_progress_cadence": 25,
    "test_fuzz": 50,
    "test_node_clients": 35,
    "test_origin": 5,
    "test_idempotency": 15,
    "test_import_url": 50,
    "test_examples": 40,
    "test_cli_render": 90,
    "test_review_page": 15,
    "test_connect": 5,
    "test_docs": 45,
    "test_upload_errors": 25,
    "test_quality_live": 100,
    "test_streaming_live": 70,
    "test_metrics_privacy": 30,
    "test_mcp_app_live": 60,
}


def work_unit(path: str) -> str:
    """The work unit of a test file (`tests/test_x.py`): the shared servers' modules are one, every other file its
    own."""
    return SHARED_SERVERS if Path(path).stem in SHARED_SERVER_MODULES else path


def unit_seconds(unit: str) -> int:
    if unit == SHARED_SERVERS:
        return sum(MODULE_SECONDS.get(name, 0) for name in SHARED_SERVER_MODULES)
    return MODULE_SECONDS.get(Path(unit).stem, 0)


@pytest.hookimpl(optionalhook=True)  # xdist's hook: without xdist (-p no:xdist), nothing to do
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile` with the shared servers' modules as one unit, the units in the collection's order."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedServersTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(super()._split_scope(nodeid))

    config.option.loadscopereorder = False  # keep the order pytest_collection_modifyitems gave
    return SharedServersTogether(config, log)


def pytest_collection_modifyitems(session, config, items):
    """Longest work unit first (`MODULE_SECONDS`); a module's tests stay together and in their file's order."""
    first_seen: dict[str, int] = {}
    for index, item in enumerate(items):
        first_seen.setdefault(item.nodeid.split("::", 1)[0], index)

    def key(item):
        path = item.nodeid.split("::", 1)[0]
        unit = work_unit(path)
        return (-unit_seconds(unit), unit, first_seen[path])

    items.sort(key=key)  # stable: within a module, the file's order
    shared = {
        Path(item.nodeid.split("::", 1)[0]).stem
        for item in items
        if {"shared_server", "open_server"} & set(getattr(item, "fixturenames", ()))
    }
    if missing := shared - SHARED_SERVER_MODULES:
        warnings.warn(f"tests/conftest.py: add {sorted(missing)} to SHARED_SERVER_MODULES", stacklevel=1)


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "slow: starts a `vidforge serve` process, Ray, a cluster, or encodes for long (`make test-fast` leaves it out; "
        "every test without it or `ray` is in the fast lane)",
    )
    config.addinivalue_line("markers", "ray: starts a local Ray instance (slow; deselect with -m 'not ray')")
    lanes.install()
    config.addinivalue_line(
        "markers",
        "solo: a whole autoscaling cluster, or a scrape that waits on Ray's metric export: `make test` runs these "
        "alone, after the two-worker lane (beside another file's load, Ray's health checks and export lag fail them)",
    )


@pytest.fixture(scope="session")
def anyio_backend():
    """`@pytest.mark.anyio` tests run on asyncio (what Ray, Serve and the servers here run on)."""
    return "asyncio"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Tell the lanes' checks (tests/lanes.py) which test is running: one that starts Ray or a server needs a mark."""
    lanes.current = item
    try:
        return (yield)
    finally:
        lanes.current = None


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory):
    """A real S3 REST server (moto) on a free loopback port with one empty bucket; stopped after the module."""
    from tests.s3_server import S3Server

    server = S3Server(tmp_path_factory.mktemp("s3")).start()
    yield server
    server.stop()


def module_tokens(session: pytest.Session) -> dict[str, str]:
    """The union of the `TOKENS` of the collected modules that use `shared_server`, one owner per principal."""
    tokens: dict[str, str] = {}
    owner: dict[str, str] = {}
    modules = {item.module for item in session.items if "shared_server" in getattr(item, "fixturenames", ())}
    for module in sorted(modules, key=lambda m: m.__name__):
        for token, principal in module.TOKENS.items():
            assert token not in tokens, f"token {token!r} of {module.__name__} is also {owner[tokens[token]]}'s"
            assert owner.setdefault(principal, module.__name__) == module.__name__, (
                f"principal {principal!r} belongs to both {owner[principal]} and {module.__name__}"
            )
            tokens[token] = principal
    return tokens


@pytest.fixture(scope="session")
def import_ca(tmp_path_factory) -> CertificateAuthority:
    """The certificate authority of the HTTPS servers the import tests fetch from (tests/https_origin.py)."""
    return CertificateAuthority(tmp_path_factory.mktemp("import-ca"))


@pytest.fixture(scope="session")
def media_origin(import_ca):
    """An HTTPS server on 127.0.0.1 that the shared servers import from (vidforge_import_asset): tests add answers."""
    origin = Origin("127.0.0.1", import_ca)
    yield origin
    origin.stop()


def importing_env(ca: CertificateAuthority) -> dict[str, str]:
    """The shared servers trust the import tests' CA (the standard SSL_CERT_FILE) and may import from 127.0.0.1 —
    loopback, which the default settings refuse (tests/test_import_url.py shows that on a server of its own)."""
    return {"SSL_CERT_FILE": str(ca.ca_file), "VIDFORGE_IMPORT_ALLOW_HOSTS": "127.0.0.1"}


@pytest.fixture(scope="session")
def shared_server(request, tmp_path_factory, import_ca):
    env = {**SHARED_ENV, "VIDFORGE_ALLOWED_ORIGINS": SHARED_ALLOWED_ORIGIN, **importing_env(import_ca)}
    tokens = module_tokens(request.session)
    with ServerProcess(tmp_path_factory.mktemp("shared") / "data", env=env, tokens=tokens, warm_pool=True) as proc:
        _started["shared_server"] = proc
        yield proc


@pytest.fixture(scope="session")
def open_server(tmp_path_factory, import_ca):
    env = {**SHARED_ENV, **importing_env(import_ca)}
    with ServerProcess(tmp_path_factory.mktemp("open") / "data", env=env) as proc:
        _started["open_server"] = proc
        yield proc


_started: dict[str, ServerProcess] = {}  # the shared servers this process started, by fixture name


def on_shared_servers(item: pytest.Item | None) -> bool:
    return item is not None and work_unit(item.nodeid.split("::", 1)[0]) == SHARED_SERVERS


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """After the last test of the shared servers' modules (they run together, `work_unit`), stop the servers
    rather than keep them to the end of the session: an idle server takes ~7% of a core (2.2 CPU-s per 30 s),
    which the files after them on this worker would otherwise lose."""
    if on_shared_servers(item) and not on_shared_servers(nextitem):
        for proc in _started.values():
            proc.kill()


def pytest_runtest_setup(item):
    """A shared server asked for after that stop (a module missing from SHARED_SERVER_MODULES) starts again,
    on its own data dir and port."""
    for name, proc in _started.items():
        if name in getattr(item, "fixturenames", ()) and proc.proc.poll() is not None:
            proc.start()
