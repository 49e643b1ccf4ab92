"""Shared pytest configuration."""

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "ray: starts a local Ray instance (slow; deselect with -m 'not ray')")
    config.addinivalue_line("markers", "fast: in-process, no Ray, no server, no encode (`make test-fast`: -m fast)")


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory):
    """A real S3 REST server (moto) on a free loopback port with one empty bucket; stopped after the module."""
    from tests.s3_server import S3Server

    server = S3Server(tmp_path_factory.mktemp("s3")).start()
    yield server
    server.stop()
