"""Shared test configuration: the `slow` marker (end-to-end tests; CI runs them too), the
session fixtures of the services some tests need (started on first use, once per session), and
one check over the whole session: every manifest.json the suite's runs wrote reads back as a
`Manifest`, the contract the trainer reads, and every statistics.json as `Statistics`."""

from __future__ import annotations

import pytest

from tests.services.beam_portable import beam_portable_services  # noqa: F401  (fixture)
from tests.services.chromium import chromium  # noqa: F401  (fixture)
from tests.services.gcs import gcs_emulator  # noqa: F401  (fixture)
from tests.services.postgres import postgres_server  # noqa: F401  (fixture)
from tests.transforms.contract.written import unreadable_manifests


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: end-to-end tests that take more than ~10 s")
    config.addinivalue_line(
        "markers", "timed: asserts wall-clock limits; `make test` runs these alone, first"
    )


@pytest.fixture(scope="session", autouse=True)
def every_written_manifest_parses(tmp_path_factory):
    """After the last test: the manifests the session wrote under its temporary folder (ETL
    runs, the trainer tests' datasets, the tests' own) all read back as a `Manifest`, and
    their statistics as `Statistics`."""
    yield
    read, problems = unreadable_manifests(tmp_path_factory.getbasetemp())
    assert not problems, f"{len(problems)} of {read} manifests do not parse:\n" + "\n".join(
        problems
    )
