"""What an image's config says a container of it starts with: environment, folder, user,
entrypoint. Read defensively: the config comes from a registry, not from sandlot."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ImageConfig:
    """The parts of an OCI image config (`config` object) a sandbox honours."""

    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    #: `user[:group]`, None for root (an empty User is root too, as in Docker).
    user: str | None = None
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()

    @classmethod
    def from_oci(cls, config: dict[str, Any]) -> ImageConfig:
        env: dict[str, str] = {}
        for item in _strings(config.get("Env")):
            key, eq, value = item.partition("=")
            if eq and key:
                env[key] = value
        workdir = config.get("WorkingDir")
        user = config.get("User")
        return cls(env=env,
                   workdir=workdir if isinstance(workdir, str) and workdir.startswith("/")
                   else None,
                   user=user if isinstance(user, str) and user.strip() else None,
                   entrypoint=tuple(_strings(config.get("Entrypoint"))),
                   cmd=tuple(_strings(config.get("Cmd"))))


def _strings(value: object) -> list[str]:
    """A list of strings, or nothing (a config may hold null or garbage there)."""
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, str)]


def non_root(user: str | None) -> str | None:
    """`user[:group]`, or None for plain root (`root`, `0`, empty): who a process runs as,
    in the form sandlot passes on (None: root)."""
    if user is None or not user.strip():
        return None
    return None if user.split(":")[0] in {"root", "0"} and ":" not in user else user
