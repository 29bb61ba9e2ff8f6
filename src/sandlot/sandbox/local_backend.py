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


def _owner_dead(name: str) -> bool:
    owner = name.lstrip(".").removeprefix("build-").removeprefix("work-").split("-", 1)[0]
    return owner.isdigit() and not Path(f"/proc/{owner}").exists()


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
        sandbox = LocalSandbox(SandboxSpec(**{**spec.__dict__, "layers": layers}), scratch)
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
        for folder in (self.scratch_root, self.layers.root):
            if not folder.is_dir():
                continue
            candidates = list(folder.iterdir())
            candidates += [p for d in folder.iterdir() if d.is_dir() for p in d.iterdir()
                           if p.name.startswith("work-")] if folder == self.layers.root else []
            for path in candidates:
                if path.is_dir() and _owner_dead(path.name) and (
                        folder == self.scratch_root or path.name.startswith((".build-", "work-"))):
                    await asyncio.to_thread(remove_tree, path, ignore_errors=True)
                    removed += 1
        return removed


def check_local_backend() -> None:
    """Raise SandboxError with an install hint if the local sandbox cannot run here."""
    from sandlot.sandbox.local import INSTALL_HINT, REQUIRED_TOOLS

    if os.geteuid() != 0:
        raise SandboxError("the local sandbox needs root (it mounts overlays); run as root")
    missing = [t for t in (*REQUIRED_TOOLS, "slirp4netns") if shutil.which(t) is None]
    if missing:
        raise SandboxError(f"missing {', '.join(missing)}; {INSTALL_HINT}")
