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

BACKENDS = ("local",)


def create_backend(name: str, cache_dir: Path) -> SandboxBackend:
    """Raises: ValueError for an unknown name; SandboxError if the backend cannot run here."""
    if name == "local":
        from sandlot.sandbox.local_backend import LocalBackend, check_local_backend

        check_local_backend()
        return LocalBackend(cache_dir)
    raise ValueError(f"unknown sandbox {name!r}; choose one of: {', '.join(BACKENDS)}")


__all__ = ["BACKENDS", "EnvironmentRequest", "ExecResult", "Sandbox", "SandboxBackend",
           "SandboxSpec", "create_backend"]
