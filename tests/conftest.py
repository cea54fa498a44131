"""Fixtures shared by the end-to-end tests."""

from __future__ import annotations

from collections.abc import Iterator

import processes
import pytest
from clients import World


@pytest.fixture(autouse=True)
def _no_process_left_behind() -> Iterator[None]:
    """Kills the process group of anything the test started (tests/processes.py) and left
    running: the test's own cleanup did not run to the end (a timeout in the middle of it).
    What a module's fixtures started before the test is theirs to stop, and left alone."""
    shared = processes.recorded()
    yield
    processes.stop_all(keep=shared)


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
