"""Building a task's Dockerfile for the local sandbox: its steps replayed in throw-away
sandboxes, each result kept as a cached overlay layer (see layers.py).

On a pulled image every step is a layer of its own; a multi-stage build builds the stages
the last one needs, each on its own image (or on the stage it starts FROM), and a
`COPY --from` copies out of a sandbox of that stage or image, started for the copy. On the
host's root the whole (single-stage) build is one layer.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from sandlot.errors import ErrorKind, TrialError
from sandlot.fsutil import write_atomic
from sandlot.images import PulledImage
from sandlot.images.config import ImageConfig
from sandlot.sandbox.base import EnvironmentInfo, EnvironmentRequest, SandboxSpec
from sandlot.sandbox.layers import LayerCache, replay_dockerfile, step_key
from sandlot.sandbox.local import LocalSandbox
from sandlot.tasks.dockerfile import CopyStep, DockerfilePlan, Step


@dataclass(frozen=True)
class Root:
    """What a sandbox of the task is rooted in, and how result.json names it."""

    info: EnvironmentInfo
    image: PulledImage | None = None
    config: ImageConfig | None = None
    removed_paths: tuple[str, ...] = ()
    added_links: dict[str, str] = field(default_factory=dict)

    def under(self, spec: SandboxSpec) -> SandboxSpec:
        """`spec` standing on this root."""
        spec = replace(spec, removed_paths=self.removed_paths, added_links=self.added_links)
        if self.image is not None and self.config is not None:
            spec = replace(spec, root_layers=self.image.layers, base_env=self.config.env)
        return spec


@dataclass(frozen=True)
class BuiltStage:
    """A stage as built: its root, its layers (newest first) and its last layer's key
    (what a later step, or a `COPY --from` of it, is keyed on)."""

    root: Root
    layers: tuple[Path, ...]
    key: str


@dataclass
class BuildLog:
    """build.log's lines; written only when some step ran (not all from the cache)."""

    lines: list[str] = field(default_factory=list)
    ran: bool = False


class LocalBuilder:
    """Builds Dockerfile steps into cached layers under `layers`, in sandboxes whose
    scratch folders go under `scratch_root`."""

    def __init__(self, layers: LayerCache, scratch_root: Path) -> None:
        self.layers = layers
        self.scratch_root = scratch_root

    async def stages(self, spec: SandboxSpec, plan: DockerfilePlan, roots: dict[str, Root],
                     request: EnvironmentRequest) -> tuple[Path, ...]:
        """The layers of the last stage of a multi-stage build (`roots`: the pulled image
        of every image the stages start FROM or copy from), building the earlier stages it
        needs first."""
        for ref, root in roots.items():
            if root.image is None:
                why = root.info.reason or "--image-policy host"
                raise TrialError(ErrorKind.BUILD_FAILED,
                                 f"a multi-stage build (a second FROM, or COPY --from) runs "
                                 f"on pulled images only, and {ref} is not pulled ({why}); "
                                 "use --sandbox docker for this task", "setup")
        deadline = time.monotonic() + request.build_timeout_sec
        log = BuildLog()
        built: dict[int, BuiltStage] = {}
        try:
            for index in plan.needed_stages():
                stage = plan.stages[index]
                log.lines.append(f"stage {stage.name or index}:")
                built[index] = await self._stage(spec, plan, stage, roots, built, request,
                                                 log, deadline)
            log.lines.append("last stage:")
            last = await self._stage(spec, plan, plan, roots, built, request, log, deadline)
        finally:
            if log.ran:
                write_atomic(request.log_dir / "build.log", "\n".join(log.lines) + "\n")
        return last.layers

    async def _stage(self, spec: SandboxSpec, plan: DockerfilePlan, stage: DockerfilePlan,
                     roots: dict[str, Root], built: dict[int, BuiltStage],
                     request: EnvironmentRequest, log: BuildLog,
                     deadline: float) -> BuiltStage:
        if stage.base_stage is not None:
            below = built[stage.base_stage]
        else:
            root = roots[str(stage.base_image)]
            assert root.image is not None
            below = BuiltStage(root, (), root.image.digest)
        stage_spec = below.root.under(spec)
        names = {i: s.name or f"stage {i}" for i, s in enumerate(plan.stages)}

        def source_of(step: CopyStep) -> tuple[BuiltStage, str]:
            if step.from_stage is not None:
                return built[step.from_stage], names[step.from_stage]
            root = roots[str(step.from_image)]
            assert root.image is not None
            return BuiltStage(root, (), root.image.digest), str(step.from_image)

        layers, key = await self.steps(stage_spec, stage.steps, below.key, request, log,
                                       deadline, below=below.layers, source_of=source_of)
        return BuiltStage(below.root, layers, key)

    async def steps(self, spec: SandboxSpec, steps: list[Step], parent: str,
                    request: EnvironmentRequest, log: BuildLog, deadline: float, *,
                    below: tuple[Path, ...] = (),
                    source_of: Callable[[CopyStep], tuple[BuiltStage, str]] | None = None,
                    ) -> tuple[tuple[Path, ...], str]:
        """`steps` on `parent` (an image's manifest digest or a layer's key) and the
        layers `below`, one cached layer each: a step runs only when no trial or job has
        run it on the same parent before. Returns the layers (newest first) and the key
        of the last."""
        layers = below
        for number, step in enumerate(steps, start=1):
            source = None
            if isinstance(step, CopyStep) and not step.from_context:
                if source_of is None:
                    raise TrialError(ErrorKind.BUILD_FAILED, f"Dockerfile line {step.line}: "
                                     "COPY --from outside a multi-stage build", "setup")
                source = source_of(step)
            key = await asyncio.to_thread(step_key, parent, step, request.environment_dir,
                                          source[0].key if source is not None else None)

            async def build(upper: Path, step: Step = step, under: tuple[Path, ...] = layers,
                            source: tuple[BuiltStage, str] | None = source) -> None:
                log.ran = True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TrialError(ErrorKind.BUILD_TIMEOUT, "the Dockerfile's steps took "
                                     f"longer than {request.build_timeout_sec:g}s "
                                     "(build_timeout_sec)", "setup")
                spec_here = replace(spec, layers=under)
                if source is None:
                    await self.replay(upper, spec_here, [step], request, log.lines, remaining)
                    return
                async with self._source_sandbox(spec, source[0]) as sandbox:
                    await self.replay(upper, spec_here, [step], request, log.lines,
                                      remaining, source=sandbox, where=source[1])

            before = len(log.lines)
            layer = await self.layers.get(key, build)
            if len(log.lines) == before:
                log.lines.append(f"step {number}: cached ({key})")
            layers = (layer, *layers)
            parent = key
        return layers, parent

    async def replay(self, upper: Path, spec: SandboxSpec, steps: list[Step],
                     request: EnvironmentRequest, log: list[str], timeout_sec: float, *,
                     source: LocalSandbox | None = None, where: str = "") -> None:
        """Run `steps` in a build sandbox on `spec`'s root and layers, writing to `upper`."""
        build_spec = SandboxSpec(name=f"build-{spec.name}", workdir="/",
                                 masked_paths=spec.masked_paths, pids_max=spec.pids_max,
                                 allow_private_network=spec.allow_private_network,
                                 root_layers=spec.root_layers, base_env=spec.base_env,
                                 layers=spec.layers if spec.root_layers else (),
                                 removed_paths=spec.removed_paths,
                                 added_links=spec.added_links)
        builder = LocalSandbox(build_spec, upper.parent, upper_dir=upper)
        try:
            await builder.start()
            await replay_dockerfile(builder, DockerfilePlan(steps=steps),
                                    request.environment_dir, timeout_sec, log,
                                    source=source, where=where)
        finally:
            await asyncio.shield(builder.stop())

    @contextlib.asynccontextmanager
    async def _source_sandbox(self, spec: SandboxSpec,
                              stage: BuiltStage) -> AsyncIterator[LocalSandbox]:
        """A sandbox of a stage (or an image) that a `COPY --from` reads from."""
        source_spec = stage.root.under(SandboxSpec(
            name=f"from-{spec.name}", workdir="/", masked_paths=spec.masked_paths,
            pids_max=spec.pids_max, layers=stage.layers))
        scratch = self.scratch_root / f"{os.getpid()}-from-{spec.name}-{secrets.token_hex(3)}"
        sandbox = LocalSandbox(source_spec, scratch)
        try:
            await sandbox.start()
            yield sandbox
        finally:
            await asyncio.shield(sandbox.stop())
