"""Session cleanup for the docker backend's tests: the task images they built."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def remove_built_test_images() -> Iterator[None]:
    """Most docker tests build throw-away images (a random token in a RUN step): remove
    the ones this session built, except those a test kept (the examples' Debian builds,
    which later runs reuse)."""
    yield
    import docker_support

    from sandlot.sandbox.docker_engine import _ENGINES, KEY_LABEL, OWNER_LABEL, owner_id

    for engine in list(_ENGINES.values()):
        with contextlib.suppress(Exception):
            images = engine.api.images(filters={"label": f"{OWNER_LABEL}={owner_id()}"})
            for image in images:
                tags = set(image.get("RepoTags") or [])
                key = (image.get("Labels") or {}).get(KEY_LABEL, "")
                if tags & docker_support.KEEP_IMAGES or key in docker_support.KEEP_KEYS:
                    continue
                with contextlib.suppress(Exception):
                    engine.api.remove_image(image["Id"], force=True)
