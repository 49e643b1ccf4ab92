"""Shared pytest configuration."""


def pytest_configure(config):
    config.addinivalue_line("markers", "ray: starts a local Ray instance (slow; deselect with -m 'not ray')")
    config.addinivalue_line("markers", "fast: in-process, no Ray, no server, no encode (`make test-fast`: -m fast)")
