"""Fixtures shared by the end-to-end tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from clients import World


@pytest.fixture
def world() -> Iterator[World]:
    """The proton event loop for a test's clients; every connection is closed afterwards."""
    w = World()
    try:
        yield w
    finally:
        w.close()
