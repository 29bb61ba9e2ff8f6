"""The local backend: LocalSandbox per trial, Dockerfile steps replayed once into a layer."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
from pathlib import Path

from typing_extensions import override

from sandlot.errors import SandboxError, TrialError
from sandlot.fsutil import write_atomic
from sandlot.hostguard import remove_tree
from sandlot.sandbox.base import EnvironmentRequest, Sandbox, SandboxSpec
from sandlot.sandbox.cgroups import sweep_stale
from sandlot.sandbox.layers import LayerCache, layer_key, replay_dockerfile
from sandlot.sandbox.local import LocalSandbox
from sandlot.tasks.dockerfile import parse_dockerfile


def folder_owner(name: str) -> int | None:
    """The sandlot pid a scratch, build or overlay work folder is named after."""
    owner = name.lstrip(".").removeprefix("build-").removeprefix("work-").split("-", 1)[0]
    return int(owner) if owner.isdigit() else None


def _owner_dead(name: str) -> bool:
    owner = folder_owner(name)
    return owner is not None and not Path(f"/proc/{owner}").exists()


class LocalBackend:
    """Scratch space and cached layers live under `cache_dir` (masked from every sandbox)."""

    name = "local"

    def __init__(self, cache_dir: Path) -> None:
        self.cache_dir = cache_dir
        self.scratch_root = cache_dir / "scratch"
        self.layers = LayerCache(cache_dir / "layers")

    @override
    async def create(self, request: EnvironmentRequest) -> Sandbox:
        spec = request.spec
        dockerfile = request.environment_dir / "Dockerfile"
        plan = parse_dockerfile(dockerfile.read_text()) if dockerfile.is_file() else None
        layers: tuple[Path, ...] = ()
        if plan is not None and plan.steps:
            key = layer_key(request.digest, plan)

            async def build(upper: Path) -> None:
                await self._build(upper, spec, plan, request)

            layers = (await self.layers.get(key, build),)
        scratch = self.scratch_root / f"{os.getpid()}-{spec.name}-{secrets.token_hex(3)}"
        image: dict[str, object] = {"layers": layers}
        if plan is not None and plan.entrypoint:
            image.update(entrypoint=tuple(plan.entrypoint), entrypoint_user=plan.user,
                         entrypoint_takes_args=plan.entrypoint_takes_args)
        sandbox = LocalSandbox(SandboxSpec(**{**spec.__dict__, **image}), scratch)
        try:
            await sandbox.start()
        except BaseException:
            await asyncio.shield(sandbox.stop())
            raise
        return sandbox

    async def _build(self, upper: Path, spec: SandboxSpec, plan: object,
                     request: EnvironmentRequest) -> None:
        build_spec = SandboxSpec(name=f"build-{spec.name}", workdir="/",
                                 masked_paths=spec.masked_paths, pids_max=spec.pids_max,
                                 allow_private_network=spec.allow_private_network)
        builder = LocalSandbox(build_spec, upper.parent, upper_dir=upper)
        log: list[str] = []
        try:
            await builder.start()
            await replay_dockerfile(builder, plan, request.environment_dir,  # type: ignore[arg-type]
                                    request.build_timeout_sec, log)
        except TrialError:
            raise
        finally:
            await asyncio.shield(builder.stop())
            write_atomic(request.log_dir / "build.log", "\n".join(log) + "\n")

    @override
    async def sweep(self) -> int:
        """Remove scratch and build folders and cgroups whose owning sandlot is gone."""
        removed = await asyncio.to_thread(sweep_stale)
        for path in self.owned_folders():
            if _owner_dead(path.name):
                await asyncio.to_thread(remove_tree, path, ignore_errors=True)
                removed += 1
        return removed

    def owned_folders(self) -> list[Path]:
        """Scratch folders, unfinished builds and per-sandbox overlay work folders: each
        named after the sandlot process that uses it (`folder_owner`)."""
        found: list[Path] = []
        if self.scratch_root.is_dir():
            found += [p for p in self.scratch_root.iterdir() if p.is_dir()]
        if self.layers.root.is_dir():
            for entry in self.layers.root.iterdir():
                if not entry.is_dir():
                    continue
                if entry.name.startswith(".build-"):
                    found.append(entry)
                else:
                    found += [p for p in entry.iterdir()
                              if p.is_dir() and p.name.startswith("work-")]
        return found


def check_local_backend() -> None:
    """Raise SandboxError with an install hint if the local sandbox cannot run here."""
    from sandlot.sandbox.local import INSTALL_HINT, REQUIRED_TOOLS

    if os.geteuid() != 0:
        raise SandboxError("the local sandbox needs root (it mounts overlays); run as root")
    missing = [t for t in (*REQUIRED_TOOLS, "slirp4netns") if shutil.which(t) is None]
    if missing:
        raise SandboxError(f"missing {', '.join(missing)}; {INSTALL_HINT}")
