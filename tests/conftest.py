"""Shared pytest configuration."""


def pytest_configure(config):
    config.addinivalue_line("markers", "ray: starts a local Ray instance (slow; deselect with -m 'not ray')")
