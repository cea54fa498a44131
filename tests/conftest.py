"""Fixtures shared by the end-to-end tests."""

from __future__ import annotations

from collections.abc import Iterator

import processes
import pytest
from clients import World


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Kills the process group of anything the test's body started (tests/processes.py) and
    left running: its own cleanup did not run to the end (a timeout in the middle of it).
    Fixtures stop what they started at their teardown, and a module's fixture may start its
    router in a test's setup (through getfixturevalue) for the tests after it too."""
    before = processes.recorded()
    try:
        return (yield)
    finally:
        processes.stop_all(keep=before)


@pytest.fixture
def world() -> Iterator[World]:
    """The proton event loop for a test's clients; every connection is closed afterwards."""
    w = World()
    try:
        yield w
    finally:
        w.close()


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    """One SparkSession per pytest-xdist worker for the pipeline tests: local[2], few shuffle
    partitions, no UI, no progress bar. pyspark is imported only when a test asks for it."""
    from pipeline.session import spark_session

    session = spark_session("local[2]", "routernet-tests", shuffle_partitions=2, progress=False)
    yield session
    session.stop()
