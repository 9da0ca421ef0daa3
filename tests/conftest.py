"""Shared test configuration: the `slow` marker (end-to-end tests; CI runs them too)."""


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: end-to-end tests that take more than ~10 s")
