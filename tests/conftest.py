"""Shared test configuration: the `slow` marker (end-to-end tests; CI runs them too), and the
session fixtures of the services some tests need (started on first use, once per session)."""

from tests.services.beam_portable import beam_portable_services  # noqa: F401  (fixture)
from tests.services.chromium import chromium  # noqa: F401  (fixture)
from tests.services.gcs import gcs_emulator  # noqa: F401  (fixture)
from tests.services.postgres import postgres_server  # noqa: F401  (fixture)


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: end-to-end tests that take more than ~10 s")
