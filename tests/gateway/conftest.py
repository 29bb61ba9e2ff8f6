"""Fixtures for the gateway tests: one event loop per test; no price-map fetch by LiteLLM."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import pytest

# LiteLLM must use its bundled price map, never fetch one (no network beyond loopback).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


@pytest.fixture
def runner() -> Iterator[asyncio.Runner]:
    """A fresh event loop for one test: `runner.run(coro)` as many times as needed."""
    with asyncio.Runner() as r:
        yield r
