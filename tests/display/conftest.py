"""Fixtures for the display tests."""

from __future__ import annotations

import pytest

from .support import Clock


@pytest.fixture
def clock() -> Clock:
    return Clock()
