"""The local backend: LocalSandbox per trial, Dockerfile steps replayed once into a layer."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Literal

from typing_extensions import override

from sandlot.errors import ErrorKind, SandboxError, TrialError
from sandlot.fsutil import write_atomic
from sandlot.hostguard import remove_tree
from sandlot.images import ImagePullError, ImageReferenceError, ImageStore
from sandlot.images.config import ImageConfig, non_root
from sandlot.images.reference import override_image, parse_image_ref
from sandlot.images.store import IMAGES_FOLDER
from sandlot.sandbox.base import EnvironmentInfo, EnvironmentRequest, Sandbox, SandboxSpec
from sandlot.sandbox.cgroups import sweep_stale
from sandlot.sandbox.files import needs_environment_upload, upload_environment
from sandlot.sandbox.layers import LayerCache, layer_key
from sandlot.sandbox.local import LocalSandbox
from sandlot.sandbox.local_build import BuildLog, LocalBuilder, Root
from sandlot.tasks.dockerfile import DockerfilePlan, parse_dockerfile
from sandlot.tasks.loader import DEFAULT_WORKDIR


def folder_owner(name: str) -> int | None:
    """The sandlot pid a scratch, build or overlay work folder is named after."""
    owner = name.lstrip(".").removeprefix("build-").removeprefix("work-").split("-", 1)[0]
    return int(owner) if owner.isdigit() else None


def _owner_dead(name: str) -> bool:
    owner = folder_owner(name)
    return owner is not None and not Path(f"/proc/{owner}").exists()


#: How the local backend gets a task's root: `auto` pulls the image the task names and
#: falls back to the host's root (labelled host-fallback) when it cannot; `strict` refuses
#: the task instead; `host` never pulls (every task on the host's root, labelled host).
ImagePolicy = Literal["auto", "strict", "host"]
IMAGE_POLICIES: tuple[str, ...] = ("auto", "strict", "host")


class LocalBackend:
    """Scratch space and cached layers live under `cache_dir` (masked from every sandbox);
    pulled images under `<cache_dir>/images`, shared with every other job."""

    name = "local"

    def __init__(self, cache_dir: Path, *, image_policy: ImagePolicy = "auto",
                 images: ImageStore | None = None,
                 base_image_overrides: dict[str, str] | None = None,
                 build_args: dict[str, str] | None = None,
                 notify: Callable[[str], None] | None = None) -> None:
        self.cache_dir = cache_dir
        self.scratch_root = cache_dir / "scratch"
        self.layers = LayerCache(cache_dir / "layers")
        self.builder = LocalBuilder(self.layers, self.scratch_root)
        self.images = images or ImageStore(cache_dir / IMAGES_FOLDER)
        self.image_policy = image_policy
        self.overrides = dict(base_image_overrides or {})
        #: `--build-arg`s: they override the Dockerfile's ARG defaults.
        self.build_args = dict(build_args or {})
        #: Where the one line about an image that could not be had goes (once per image).
        self.notify = notify
        #: One pull per image per job, failures included: a registry out of reach is
        #: asked once, not by every trial.
        self._roots: dict[str, asyncio.Future[Root]] = {}
        self._host_python: str | None = None

    @override
    async def create(self, request: EnvironmentRequest) -> Sandbox:
        spec = request.spec
        dockerfile = request.environment_dir / "Dockerfile"
        text = (dockerfile.read_text() if dockerfile.is_file() and request.image is None
                else None)
        plan = parse_dockerfile(text, self.build_args) if text is not None else None
        root = await self._root(request.image or (plan.stage_root_image() if plan is not None
                                                  else None))
        roots: dict[str, Root] = {}
        # Every image its stages use, then its steps parsed as those images start them.
        if plan is not None and text is not None:
            for ref in plan.images:
                roots[ref] = await self._root(ref)
            configs = {ref: r.config for ref, r in roots.items() if r.config is not None}
            if configs:
                plan = parse_dockerfile(text, self.build_args, configs)
        if not spec.workdir:  # the image's own WORKDIR (a prebuilt one's "/" without one)
            workdir = DEFAULT_WORKDIR if root.config is None else (
                root.config.workdir or ("/" if plan is None else DEFAULT_WORKDIR))
            spec = replace(spec, workdir=workdir)
            root = replace(root, info=replace(root.info, workdir=workdir))
        user = plan.user if plan is not None else (
            non_root(root.config.user) if root.config is not None else None)
        if user is not None:
            root = replace(root, info=replace(root.info, user=user))
        spec = root.under(spec)
        if plan is not None and plan.is_multi_stage:
            spec = replace(spec, layers=await self.builder.stages(spec, plan, roots, request))
        elif plan is not None and plan.steps:
            spec = replace(spec, layers=await self._build_one_stage(spec, plan, root, request))
        scratch = self.scratch_root / f"{os.getpid()}-{spec.name}-{secrets.token_hex(3)}"
        entrypoint = _entrypoint(plan, root.config)
        if entrypoint is not None:
            spec = replace(spec, entrypoint=entrypoint[0], entrypoint_user=entrypoint[1],
                           entrypoint_takes_args=entrypoint[2])
        sandbox = LocalSandbox(spec, scratch)
        sandbox.environment = root.info
        sandbox.pristine_key = pristine_key(spec, request, root.info)
        try:
            await sandbox.start()
            if needs_environment_upload(request.environment_dir, request.image):
                await upload_environment(sandbox, request.environment_dir, spec.workdir)
        except BaseException:
            await asyncio.shield(sandbox.stop())
            raise
        return sandbox

    async def _root(self, named: str | None) -> Root:
        """The task's root, decided once per image for the whole job."""
        if named is None or named == "scratch":
            return Root(EnvironmentInfo(base="host"))
        reference = override_image(named, self.overrides)
        if self.image_policy == "host":
            return Root(EnvironmentInfo(base="host", image=reference))
        if reference not in self._roots:
            self._roots[reference] = asyncio.ensure_future(self._pull_root(reference))
        return await asyncio.shield(self._roots[reference])

    async def _pull_root(self, reference: str) -> Root:
        try:
            pulled = await self.images.pull(reference)
        except ImagePullError as exc:
            reason = str(exc)
            if self.image_policy == "strict":
                raise TrialError(ErrorKind.BUILD_FAILED,
                                 f"{reason} (--image-policy strict: not run on the host's "
                                 "root instead)", "setup") from exc
            if self.notify is not None:
                self.notify(f"{reason}; its tasks run on this host's root instead "
                            "(environment.base: host-fallback in result.json)")
            return await asyncio.to_thread(self._fallback, reference, reason)
        return Root(EnvironmentInfo(base="image", image=reference, digest=pulled.named_digest),
                    image=pulled, config=ImageConfig.from_oci(pulled.config))

    def _fallback(self, reference: str, reason: str) -> Root:
        """The host's root standing in for `reference`. A python: image's pip installs
        into its Python, where Debian's refuses (PEP 668): that refusal goes, `python`
        names python3, and the Python that ran is recorded."""
        info = EnvironmentInfo(base="host-fallback", image=reference, reason=reason)
        if not is_python_image(reference):
            return Root(info)
        removed = tuple(sorted(str(p) for p in
                               Path("/usr/lib").glob("python3*/EXTERNALLY-MANAGED")))
        links: dict[str, str] = {}
        if not any(os.path.lexists(f"{d}/python") for d in ("/usr/local/bin", "/usr/bin")):
            links["/usr/local/bin/python"] = "/usr/bin/python3"
        return Root(replace(info, python=self._python_version()),
                    removed_paths=removed, added_links=links)

    def _python_version(self) -> str | None:
        if self._host_python is None:
            try:
                proc = subprocess.run(["/usr/bin/python3", "-I", "-c",
                                       "import platform; print(platform.python_version())"],
                                      capture_output=True, text=True, timeout=30, env={})
                self._host_python = proc.stdout.strip() if proc.returncode == 0 else ""
            except (OSError, subprocess.TimeoutExpired):
                self._host_python = ""
        return self._host_python or None

    async def _build_one_stage(self, spec: SandboxSpec, plan: DockerfilePlan, root: Root,
                               request: EnvironmentRequest) -> tuple[Path, ...]:
        """The Dockerfile's steps: on an image one cached layer per step; on the host's
        root one layer for the whole build (overlay stacks one layer over the host's)."""
        log = BuildLog()
        try:
            if root.image is not None:
                return (await self.builder.steps(
                    spec, plan.steps, root.image.digest, request, log,
                    time.monotonic() + request.build_timeout_sec))[0]

            async def build(upper: Path) -> None:
                log.ran = True
                await self.builder.replay(upper, spec, plan.steps, request, log.lines,
                                          request.build_timeout_sec)

            key = layer_key(request.digest, plan, root.info.base)
            return (await self.layers.get(key, build),)
        finally:
            if log.ran:
                write_atomic(request.log_dir / "build.log", "\n".join(log.lines) + "\n")

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


def pristine_key(spec: SandboxSpec, request: EnvironmentRequest,
                 info: EnvironmentInfo) -> str | None:
    """What decides a local sandbox's files at start, hashed: its layers (content-named
    folders of the cache), the image, environment/'s digest, what the host's root loses,
    gains and hides. None with an ENTRYPOINT: a service that ran first may have changed
    them. Not in it: the sandbox's name, its limits, its scratch folders."""
    if spec.entrypoint:
        return None
    made_of = {"environment": request.digest, "image": request.image, "root": info.as_dict(),
               "root_layers": [str(p) for p in spec.root_layers],
               "layers": [str(p) for p in spec.layers], "base_env": spec.base_env,
               "env": spec.env, "workdir": spec.workdir,
               "removed": list(spec.removed_paths), "links": spec.added_links,
               "masked": [str(p) for p in spec.masked_paths], "folders": list(spec.folders),
               "binds": sorted(spec.binds.values()), "mount_points": list(spec.mount_points)}
    return hashlib.sha256(json.dumps(made_of, sort_keys=True).encode()).hexdigest()


def is_python_image(reference: str) -> bool:
    """An official `python:` image (Docker Hub's library/python), by any spelling."""
    try:
        ref = parse_image_ref(reference)
    except ImageReferenceError:
        return False
    return (ref.registry in (None, "docker.io", "index.docker.io", "registry-1.docker.io")
            and ref.repository in ("python", "library/python"))


def _entrypoint(plan: DockerfilePlan | None,
                config: ImageConfig | None) -> tuple[tuple[str, ...], str | None, bool] | None:
    """The ENTRYPOINT PID 1 runs (the Dockerfile's, else the image's), its user and
    whether it takes the idle command as arguments."""
    if plan is not None and plan.entrypoint:
        return tuple(plan.entrypoint), plan.user, plan.entrypoint_takes_args
    if config is None or not config.entrypoint or (plan is not None and plan.resets_entrypoint):
        return None
    user = plan.user if plan is not None and plan.user else config.user
    return config.entrypoint, user, True


def check_local_backend() -> None:
    """Raise SandboxError with an install hint if the local sandbox cannot run here."""
    from sandlot.sandbox.local import INSTALL_HINT, REQUIRED_TOOLS
    from sandlot.sandbox.seccomp import check_syscall_filter

    if os.geteuid() != 0:
        raise SandboxError("the local sandbox needs root (it mounts overlays); run as root")
    missing = [t for t in (*REQUIRED_TOOLS, "slirp4netns") if shutil.which(t) is None]
    if missing:
        raise SandboxError(f"missing {', '.join(missing)}; {INSTALL_HINT}")
    check_syscall_filter()  # libseccomp is there (NoSyscallFilter is a SandboxError)
