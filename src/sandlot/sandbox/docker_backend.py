"""The docker backend: task images built and cached, one DockerSandbox per trial.

Everything it creates in the engine (containers, networks, volumes, images) carries the
label `sandlot.owner=<host>:<pid>:<start time>`. `sweep_docker_leftovers` removes what a
sandlot that no longer runs left behind (`sandlot sandbox cleanup`, and the start of every
run); a run removes its own at exit even when it is interrupted. Cached task images are
kept: they are the build cache (remove them with `remove_images=True`).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from typing_extensions import override

from sandlot.images.config import non_root
from sandlot.images.reference import ImageReferenceError, parse_image_ref
from sandlot.sandbox.base import EnvironmentInfo, EnvironmentRequest, Sandbox
from sandlot.sandbox.docker import ContainerSetup, DockerSandbox
from sandlot.sandbox.docker_build import BuildSpec, ImageBuilder, final_base, override_image
from sandlot.sandbox.docker_compose import MAIN_IMAGE, find_compose, load_compose
from sandlot.sandbox.docker_engine import (
    OWNER_LABEL,
    ROLE_LABEL,
    Engine,
    connect_engine,
    owner_dead,
    owner_id,
)
from sandlot.sandbox.engine_seccomp import container_seccomp_option, engine_default_profile
from sandlot.sandbox.files import needs_environment_upload, upload_environment
from sandlot.tasks.dockerfile import parse_dockerfile
from sandlot.tasks.loader import DEFAULT_WORKDIR

#: The image of a task without environment/Dockerfile (subject to --base-image-override).
DEFAULT_IMAGE = "debian:bookworm-slim"
#: Container creations at once: high -n must not stampede the engine.
ENGINE_SLOTS = 8


def _compose_variables(request: EnvironmentRequest) -> dict[str, str]:
    spec = request.spec
    memory = f"{spec.memory_mb}M" if spec.memory_mb else ""
    return {
        "MAIN_IMAGE_NAME": MAIN_IMAGE, "T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME": MAIN_IMAGE,
        "CONTEXT_DIR": str(request.environment_dir.resolve()),
        "CPUS": f"{spec.cpus:g}" if spec.cpus else "", "MEMORY": memory,
        "TEST_DIR": "/tests", "T_BENCH_TEST_DIR": "/tests",
        "T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME": "main",
        "T_BENCH_TASK_DOCKER_NAME_PREFIX": "sandlot",
        "T_BENCH_CONTAINER_LOGS_PATH": "/logs", "T_BENCH_CONTAINER_AGENT_LOGS_PATH": "/logs/agent",
        "ENV_AGENT_LOGS_PATH": "/logs/agent", "ENV_VERIFIER_LOGS_PATH": "/logs/verifier",
    }


class DockerBackend:
    """Containers through the Docker Engine API (Docker, or Podman's compatible service)."""

    name = "docker"

    def __init__(self, cache_dir: Path, *, force_build: bool = False,
                 base_image_overrides: dict[str, str] | None = None, max_builds: int = 2,
                 engine_url: str | None = None, runtime: str | None = None,
                 insecure_registries: frozenset[str] = frozenset(),
                 build_args: dict[str, str] | None = None) -> None:
        """Raises: SandboxError when no engine is reachable (naming what was tried)."""
        self.engine: Engine = connect_engine(engine_url)
        self.insecure_registries = insecure_registries
        self.owner = owner_id()
        self.overrides = dict(base_image_overrides or {})
        self.builder = ImageBuilder(self.engine, self.owner, cache_dir,
                                    overrides=self.overrides, force_build=force_build,
                                    max_builds=max_builds, build_args=build_args)
        self.runtime = runtime or os.environ.get("SANDLOT_CONTAINER_RUNTIME") or None
        self.security_opt = container_security_opt(self.engine, cache_dir / "seccomp")
        self._slots = asyncio.Semaphore(ENGINE_SLOTS)
        _remove_own_at_exit(self.engine, self.owner)

    async def _images(self, request: EnvironmentRequest) -> ContainerSetup:
        env_dir = request.environment_dir
        timeout = request.build_timeout_sec
        request.log_dir.mkdir(parents=True, exist_ok=True)
        compose_path = find_compose(env_dir)
        setup = ContainerSetup(image="", owner=self.owner, runtime=self.runtime,
                               security_opt=self.security_opt)
        dockerfile_env: dict[str, str] = {}
        if request.image is not None:  # a prebuilt image, run as it is
            ref = override_image(request.image, self.overrides)
            await self._pull_plain_http(ref, timeout)
            setup.image = await self.builder.pull_if_missing(ref, timeout)
            setup.base_image = setup.image
        elif compose_path is None:
            if (env_dir / "Dockerfile").is_file():
                base = await self._base_image(env_dir / "Dockerfile", timeout)
                setup.image = await self.builder.image(
                    BuildSpec(env_dir, "Dockerfile", "main"), request.digest, timeout,
                    request.log_dir / "build.log")
                dockerfile_env = _dockerfile_env(env_dir / "Dockerfile", self.builder.build_args)
                setup.base_image = base
            else:
                setup.image = await self.builder.pull_if_missing(DEFAULT_IMAGE, timeout)
                setup.base_image = setup.image
        else:
            plan = load_compose(compose_path, _compose_variables(request))
            main = plan.main

            async def image_of(svc: Any) -> str:
                if svc.context is None:
                    return await self.builder.pull_if_missing(str(svc.image), timeout)
                spec = BuildSpec(svc.context, svc.dockerfile, svc.name,
                                 tuple(sorted(svc.build_args.items())), svc.target)
                return await self.builder.image(spec, request.digest, timeout,
                                                request.log_dir / f"build-{svc.name}.log")

            order = plan.start_order()
            tasks = [asyncio.ensure_future(image_of(s)) for s in (main, *order)]
            try:
                images = await asyncio.gather(*tasks)
            except BaseException:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise
            setup.image = images[0]
            setup.services = list(zip(order, images[1:], strict=True))
            setup.volumes = plan.volumes
            setup.main_binds = main.binds
            setup.main_depends_on = main.depends_on
            setup.env.update(main.environment)
            setup.health_timeout_sec = max(60.0, request.build_timeout_sec)
            if main.context is not None and (main.context / main.dockerfile).is_file():
                dockerfile_env = _dockerfile_env(main.context / main.dockerfile)
                setup.base_image = _final_base(main.context / main.dockerfile, self.overrides)
            elif main.context is None and main.image:
                setup.base_image = override_image(str(main.image), self.overrides)
        # ENV the Dockerfile set is in the image already (with the base image's own PATH,
        # which the task loader can only guess): pass on only what task.toml adds.
        setup.env.update({k: v for k, v in request.spec.env.items()
                          if dockerfile_env.get(k) != v})
        return setup

    async def _base_image(self, dockerfile: Path, timeout_sec: float) -> str | None:
        """The image the Dockerfile builds on, pulled first when its registry is spoken to
        over plain HTTP (see ImageBuilder.pull_plain_http)."""
        base = _final_base(dockerfile, self.overrides)
        if base is not None:
            await self._pull_plain_http(base, timeout_sec)
        return base

    async def _pull_plain_http(self, image: str, timeout_sec: float) -> None:
        """Pull `image` first if its registry is spoken to over plain HTTP."""
        try:
            ref = parse_image_ref(image)
        except ImageReferenceError:
            return
        if ref.on_loopback or (ref.registry or "") in self.insecure_registries:
            await self.builder.pull_plain_http(image, timeout_sec)

    @override
    async def create(self, request: EnvironmentRequest) -> Sandbox:
        setup = await self._images(request)
        digest = (await self.builder.repo_digest(setup.base_image)
                  if setup.base_image else None)
        config = await self.builder.image_config(setup.image)
        spec, workdir = request.spec, None
        if not spec.workdir:  # the image's own WORKDIR (a prebuilt one's "/" without one)
            workdir = config.workdir or ("/" if request.image is not None else DEFAULT_WORKDIR)
            spec = replace(spec, workdir=workdir)
        async with self._slots:
            sandbox = DockerSandbox(spec, self.engine, setup)
            await sandbox.start()
        sandbox.environment = EnvironmentInfo(base="image", image=setup.base_image,
                                              digest=digest, workdir=workdir,
                                              user=non_root(config.user))
        if needs_environment_upload(request.environment_dir, request.image):
            try:
                await upload_environment(sandbox, request.environment_dir, spec.workdir)
            except BaseException:
                await asyncio.shield(sandbox.stop())
                raise
        return sandbox

    @override
    async def sweep(self) -> int:
        """Remove containers, networks and volumes of sandlot runs that are gone."""
        return await sweep_docker_leftovers(self.engine)


def _final_base(path: Path, overrides: dict[str, str]) -> str | None:
    try:
        return final_base(path.read_text(encoding="utf-8"), overrides)
    except (OSError, UnicodeDecodeError):
        return None


def _dockerfile_env(path: Path, build_args: dict[str, str] | None = None) -> dict[str, str]:
    try:
        return dict(parse_dockerfile(path.read_text(encoding="utf-8"), build_args).env)
    except (OSError, UnicodeDecodeError):
        return {}


def _owned(labels: dict[str, str] | None, dead: bool, owner: str | None = None) -> bool:
    value = (labels or {}).get(OWNER_LABEL)
    if value is None:
        return False
    if owner is not None:
        return value == owner
    return owner_dead(value) if dead else True


def _remove_everything(engine: Engine, *, owner: str | None = None, dead_only: bool = True,
                       remove_images: bool = False) -> int:
    """Blocking: remove what matches; `owner` (this run's) or dead owners' resources."""
    api = engine.api
    removed = 0
    for c in api.containers(all=True, filters={"label": OWNER_LABEL}):
        if _owned(c.get("Labels"), dead_only, owner):
            with contextlib.suppress(Exception):
                api.remove_container(c["Id"], force=True, v=True)
                removed += 1
    for n in api.networks(filters={"label": OWNER_LABEL}):
        if _owned(n.get("Labels"), dead_only, owner):
            with contextlib.suppress(Exception):
                api.remove_network(n["Id"])
                removed += 1
    volumes = (api.volumes(filters={"label": OWNER_LABEL}) or {}).get("Volumes") or []
    for v in volumes:
        if _owned(v.get("Labels"), dead_only, owner):
            with contextlib.suppress(Exception):
                api.remove_volume(v["Name"], force=True)
                removed += 1
    if owner is None:
        for image in api.images(all=False, filters={"label": f"{ROLE_LABEL}=image"}):
            tags = [t for t in image.get("RepoTags") or [] if "<none>" not in t]
            if remove_images or (not tags and _owned(image.get("Labels"), dead_only)):
                with contextlib.suppress(Exception):
                    api.remove_image(image["Id"], force=True)
                    removed += 1
    return removed


async def sweep_docker_leftovers(engine: Engine | None = None, *,
                                 remove_images: bool = False) -> int:
    """Remove what killed sandlot runs left in the engine; returns how many things.

    With `remove_images`, also every cached task image. No reachable engine: nothing to do.
    """
    from sandlot.errors import SandboxError

    if engine is None:
        try:
            engine = connect_engine()
        except SandboxError:
            return 0
    return await engine.call(_remove_everything, engine, remove_images=remove_images)


_AT_EXIT: set[tuple[int, str]] = set()


def _remove_own_at_exit(engine: Engine, owner: str) -> None:
    """A last net: whatever this process still has in the engine when it exits."""
    if (id(engine), owner) in _AT_EXIT:
        return
    _AT_EXIT.add((id(engine), owner))

    def remove() -> None:
        with contextlib.suppress(Exception):
            _remove_everything(engine, owner=owner, dead_only=False)

    atexit.register(remove)


def container_security_opt(engine: Engine, folder: Path) -> list[str]:
    """`SecurityOpt` for every container: the engine's default seccomp profile with
    sandlot's denials, where the engine lacks them (a profile file under `folder` for
    Podman). Raises: EngineSeccompError (a SandboxError) when the engine has no profile
    sandlot can make stricter."""
    profile = engine_default_profile(engine.security_options, is_podman=engine.is_podman)
    option = container_seccomp_option(profile, is_podman=engine.is_podman, folder=folder)
    return [option] if option else []


def check_docker_backend() -> None:
    """Raise SandboxError if sandlot's syscall filter, which the verifier's commands run
    under, cannot be built here. (The engine itself, and whether its seccomp profile can be
    made to deny what sandlot denies, DockerBackend checks when it connects.)"""
    from sandlot.sandbox.seccomp import check_syscall_filter

    check_syscall_filter()


__all__ = ["DEFAULT_IMAGE", "DockerBackend", "check_docker_backend", "override_image",
           "sweep_docker_leftovers"]
