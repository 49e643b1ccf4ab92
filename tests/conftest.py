"""Shared pytest configuration, and the two `vidforge serve` processes the end-to-end modules share.

A server start costs 15-30 s on a loaded 2-core machine, so every module whose checks hold on the shared
settings uses one of two session-scoped servers instead of starting its own (one pair per worker of `make
test`'s two, which take whole files each):

- `shared_server`: bearer tokens. Its tokens file is the union of the `TOKENS` of the modules that use it, and
  no principal may belong to two modules, so quotas, idempotency keys and isolation checks stay per module.
- `open_server`: no tokens file (loopback, unauthenticated), for clients that send no credentials.

Both run with a 0.5 s poll hint (clients that honour it finish sooner) and a 4 MiB inline-resource limit;
`shared_server` also lists one operator origin (`SHARED_ALLOWED_ORIGIN`). Modules that need other settings,
restarts or kills start their own `tests.harness.ServerProcess`.
"""

import pytest

from tests.harness import SHARED_ALLOWED_ORIGIN, SHARED_ENV, ServerProcess


def pytest_configure(config):
    config.addinivalue_line("markers", "ray: starts a local Ray instance (slow; deselect with -m 'not ray')")
    config.addinivalue_line("markers", "fast: in-process, no Ray, no server, no encode (`make test-fast`: -m fast)")
    config.addinivalue_line(
        "markers",
        "solo: a whole autoscaling cluster, or a scrape that waits on Ray's metric export: `make test` runs these "
        "alone, after the two-worker lane (beside another file's load, Ray's health checks and export lag fail them)",
    )


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
def shared_server(request, tmp_path_factory):
    env = {**SHARED_ENV, "VIDFORGE_ALLOWED_ORIGINS": SHARED_ALLOWED_ORIGIN}
    tokens = module_tokens(request.session)
    with ServerProcess(tmp_path_factory.mktemp("shared") / "data", env=env, tokens=tokens) as proc:
        yield proc


@pytest.fixture(scope="session")
def open_server(tmp_path_factory):
    with ServerProcess(tmp_path_factory.mktemp("open") / "data", env=SHARED_ENV) as proc:
        yield proc
