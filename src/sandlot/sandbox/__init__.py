"""Sandbox backends. A name maps to a lazy factory so optional backends cost nothing."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from sandlot.sandbox.base import (
    EnvironmentRequest,
    ExecResult,
    Sandbox,
    SandboxBackend,
    SandboxSpec,
)

BACKENDS = ("local", "docker")


def create_backend(name: str, cache_dir: Path, *, force_build: bool = False,
                   base_image_overrides: dict[str, str] | None = None,
                   image_policy: str = "auto", insecure_registries: Sequence[str] = (),
                   image_cache_max_bytes: int | None = None,
                   build_args: dict[str, str] | None = None,
                   notify: Callable[[str], None] | None = None) -> SandboxBackend:
    """Raises: ValueError for an unknown name; SandboxError if the backend cannot run here.

    `base_image_overrides` (OLD -> NEW image), `build_args` and `insecure_registries` apply
    to both backends, `force_build` to the docker one; `image_policy` and `notify` (where the one
    line about an image that cannot be pulled goes) to the local one, which pulls images
    itself.
    """
    if name == "local":
        from sandlot.images import ImageStore
        from sandlot.images.store import IMAGES_FOLDER
        from sandlot.sandbox.local_backend import IMAGE_POLICIES, LocalBackend, check_local_backend

        if image_policy not in IMAGE_POLICIES:
            raise ValueError(f"--image-policy must be one of {', '.join(IMAGE_POLICIES)}, "
                             f"not {image_policy!r}")
        check_local_backend()
        store = ImageStore(cache_dir / IMAGES_FOLDER,
                           insecure_registries=frozenset(insecure_registries),
                           auth_file=registry_auth_file(), max_bytes=image_cache_max_bytes)
        return LocalBackend(cache_dir, image_policy=image_policy,  # type: ignore[arg-type]
                            images=store, base_image_overrides=base_image_overrides,
                            build_args=build_args, notify=notify)
    if name == "docker":
        from sandlot.sandbox.docker_backend import DockerBackend, check_docker_backend

        check_docker_backend()
        return DockerBackend(cache_dir, force_build=force_build,
                             base_image_overrides=base_image_overrides,
                             insecure_registries=frozenset(insecure_registries),
                             build_args=build_args)
    raise ValueError(f"unknown sandbox {name!r}; choose one of: {', '.join(BACKENDS)}")


def registry_auth_file() -> Path | None:
    """Registry credentials as Docker and Podman keep them: REGISTRY_AUTH_FILE, else
    Docker's ~/.docker/config.json (skopeo reads Podman's own auth.json by itself)."""
    named = os.environ.get("REGISTRY_AUTH_FILE")
    if named:
        return Path(named)
    docker_config = Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker")
    config = docker_config / "config.json"
    return config if config.is_file() else None


def parse_build_args(values: list[str] | None,
                     environ: dict[str, str] | None = None) -> dict[str, str]:
    """`--build-arg K=V` values (a bare `K` takes K's value from sandlot's environment, as
    `docker build` does). Raises: ValueError."""
    environ = dict(os.environ) if environ is None else environ
    out: dict[str, str] = {}
    for value in values or []:
        key, eq, given = value.partition("=")
        key = key.strip()
        if not key or not key.replace("_", "a").isalnum() or key[0].isdigit():
            raise ValueError(f"--build-arg wants NAME=VALUE, got {value!r}")
        if eq:
            out[key] = given
        elif key in environ:
            out[key] = environ[key]
        else:
            raise ValueError(f"--build-arg {key}: no value given and {key} is not set")
    return out


def parse_image_overrides(values: list[str] | None) -> dict[str, str]:
    """`--base-image-override OLD=NEW` values as a mapping. Raises: ValueError."""
    out: dict[str, str] = {}
    for value in values or []:
        old, eq, new = value.partition("=")
        if not eq or not old.strip() or not new.strip():
            raise ValueError(f"--base-image-override wants OLD=NEW, got {value!r}")
        out[old.strip()] = new.strip()
    return out


__all__ = ["BACKENDS", "EnvironmentRequest", "ExecResult", "Sandbox", "SandboxBackend",
           "SandboxSpec", "create_backend", "parse_build_args", "parse_image_overrides"]
