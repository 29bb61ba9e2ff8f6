"""Fixtures for the viewer tests: the example jobs, a headless Chromium, screenshots."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .viewer_support import CHROMIUM, CHROMIUM_ARGS, build_example_jobs


@pytest.fixture(scope="session")
def example_jobs(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Path:
    """The four example jobs (solver, giveup, first5, last5), built once per session."""
    return build_example_jobs(tmp_path_factory.getbasetemp(), cache_dir)


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where screenshots go: $SANDLOT_TEST_ARTIFACTS, else a session temp folder."""
    if env := os.environ.get("SANDLOT_TEST_ARTIFACTS"):
        path = Path(env) / "viewer"
        path.mkdir(parents=True, exist_ok=True)
        return path
    return tmp_path_factory.mktemp("viewer-screenshots")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's headless Chromium driven by Playwright (no browser download).

    Per module, not per session: Playwright's sync API keeps an event loop running in the
    main thread while it is open, and any later test's asyncio.run() would then fail."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium (scripts/install.sh)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


class Page:
    """A browser tab that records console errors and uncaught exceptions."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.errors: list[str] = []
        page.on("console", lambda m: self.errors.append(f"console: {m.text}")
                if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        page.on("requestfailed", lambda r: self.errors.append(f"request failed: {r.url}"))


@pytest.fixture
def tab(browser: Any) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    page = Page(context.new_page())
    page.page.set_default_timeout(15_000)
    try:
        yield page
    finally:
        context.close()
    assert page.errors == [], page.errors
