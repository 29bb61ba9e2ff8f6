"""Sandbox backends. A name maps to a lazy factory so optional backends cost nothing."""

from __future__ import annotations

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
                   base_image_overrides: dict[str, str] | None = None) -> SandboxBackend:
    """Raises: ValueError for an unknown name; SandboxError if the backend cannot run here.

    `force_build` and `base_image_overrides` (OLD -> NEW image) apply to the docker backend;
    the local backend builds from the host's root and ignores them.
    """
    if name == "local":
        from sandlot.sandbox.local_backend import LocalBackend, check_local_backend

        check_local_backend()
        return LocalBackend(cache_dir)
    if name == "docker":
        from sandlot.sandbox.docker_backend import DockerBackend

        return DockerBackend(cache_dir, force_build=force_build,
                             base_image_overrides=base_image_overrides)
    raise ValueError(f"unknown sandbox {name!r}; choose one of: {', '.join(BACKENDS)}")


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
           "SandboxSpec", "create_backend", "parse_image_overrides"]
