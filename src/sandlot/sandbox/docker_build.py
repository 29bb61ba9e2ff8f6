"""Task images for the docker backend: built once per environment digest, named by it.

An image is tagged `sandlot-env:<key>`, the key a digest of the build's inputs (the
environment/ digest, the service, the base-image overrides), so later trials and later
jobs find it and skip the build. Builds are bounded by their own semaphore (not the
trials'), deduplicated per key inside the process and, through a lock file, across
sandlot processes.

A build's RUN steps carry `no_proxy=sandlot-build-<token>` (a predefined build argument:
Docker and Podman pass it to RUN without an ARG and keep it out of the layer cache), so a
build that outlives its timeout is killed on the host by that mark. Podman keeps building
when the client hangs up; Docker stops, and the kill is then a no-op.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import json
import re
import secrets
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandlot.errors import ErrorKind, TrialError
from sandlot.fsutil import write_atomic
from sandlot.images.config import ImageConfig
from sandlot.images.reference import ImageReferenceError, override_image, parse_image_ref
from sandlot.locks import file_lock
from sandlot.sandbox.docker_engine import KEY_LABEL, OWNER_LABEL, ROLE_LABEL, Engine, kill_marked

#: Bump when what goes into an image changes, so old cached images are not reused.
BUILD_VERSION = "1"
IMAGE_REPO = "localhost/sandlot-env"
LOG_TAIL = 3000
_STEP = re.compile(r"^(?:\[(\d+)/\d+\]\s+)?(?:STEP|Step)\s+(\d+)/\d+\s*:", re.MULTILINE)
_FROM = re.compile(r"^(\s*FROM\s+)((?:--\S+\s+)*)(\S+)(.*)$", re.IGNORECASE)


def image_key(digest: str, service: str, dockerfile: str, overrides: dict[str, str],
              build_args: dict[str, str] | None = None) -> str:
    text = json.dumps([BUILD_VERSION, digest, service, dockerfile, sorted(overrides.items()),
                       sorted((build_args or {}).items())])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


@dataclass(frozen=True)
class Instruction:
    line: int  #: 1-based line of the original Dockerfile
    stage: int  #: 1-based build stage (a FROM starts one)
    index: int  #: 1-based position in its stage


def _instruction_starts(lines: list[str]) -> list[int]:
    """Indexes of the lines that start an instruction: not comments, continuations or
    heredoc bodies (a `FROM` inside a heredoc is text)."""
    starts: list[int] = []
    continued = False
    heredoc: str | None = None
    for index, line in enumerate(lines):
        stripped = line.strip()
        if heredoc is not None:
            if stripped == heredoc:
                heredoc = None
            continue
        if not continued and stripped and not stripped.startswith("#"):
            starts.append(index)
            hd = re.search(r"<<-?\s*['\"]?([A-Za-z_][\w.-]*)['\"]?\s*$", stripped)
            if hd and stripped.split(None, 1)[0].upper() in ("RUN", "COPY", "ADD"):
                heredoc = hd.group(1)
        if stripped and not stripped.startswith("#"):
            continued = stripped.endswith("\\")
    return starts


def rewrite_dockerfile(text: str, overrides: dict[str, str]) -> tuple[str, list[Instruction]]:
    """The Dockerfile with overridden FROM images, and where each instruction starts."""
    lines = text.split("\n")
    instructions: list[Instruction] = []
    stage, index = 0, 0
    for start in _instruction_starts(lines):
        m = _FROM.match(lines[start])
        if m:
            stage, index = stage + 1, 0
            lines[start] = (m.group(1) + m.group(2) + override_image(m.group(3), overrides)
                            + m.group(4))
        index += 1
        instructions.append(Instruction(start + 1, max(stage, 1), index))
    return "\n".join(lines), instructions


def final_base(text: str, overrides: dict[str, str]) -> str | None:
    """The image the Dockerfile's last stage is built FROM (through stage names, after
    overrides): what a result names as the image it ran on. None for `scratch` or a
    FROM that needs build arguments to be read."""
    lines = text.split("\n")
    stages: dict[str, str] = {}
    last: str | None = None
    for start in _instruction_starts(lines):
        m = _FROM.match(lines[start])
        if m is None:
            continue
        image, alias = m.group(3), m.group(4).split()
        last = stages.get(image.lower(), image)
        if len(alias) == 2 and alias[0].upper() == "AS":
            stages[alias[1].lower()] = last
    if last is None or "$" in last or last.lower() == "scratch":
        return None
    return override_image(last, overrides)


def _failing_line(log: str, instructions: list[Instruction]) -> int | None:
    steps = list(_STEP.finditer(log))
    if not steps:
        return None
    last = steps[-1]
    index = int(last.group(2))
    if last.group(1):
        stage = int(last.group(1))
        for ins in instructions:
            if ins.stage == stage and ins.index == index:
                return ins.line
        return None
    return instructions[index - 1].line if 0 < index <= len(instructions) else None


def _dockerignore(context: Path) -> list[str]:
    path = context / ".dockerignore"
    if not path.is_file():
        return []
    return [ln.strip() for ln in path.read_text(errors="replace").splitlines()
            if ln.strip() and not ln.strip().startswith("#")]


def build_context(context: Path, dockerfile_text: str, name: str) -> Any:
    """A tar of `context` (honouring .dockerignore) plus the rewritten Dockerfile as `name`."""
    from docker.utils.build import exclude_paths

    spool = tempfile.TemporaryFile()  # noqa: SIM115 (the caller closes it)
    root = context.resolve()
    with tarfile.open(fileobj=spool, mode="w") as tar:
        for rel in sorted(exclude_paths(str(root), _dockerignore(root))):
            full = root / rel
            info = tar.gettarinfo(str(full), arcname=rel)
            if info is None:
                continue
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if info.isreg():
                with full.open("rb") as fh:
                    tar.addfile(info, fh)
            else:
                tar.addfile(info)
        data = dockerfile_text.encode()
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
        tar.addfile(info, io.BytesIO(data))
    spool.seek(0)
    return spool


@dataclass(frozen=True)
class BuildSpec:
    """One image to build: a context folder and the Dockerfile in it (relative)."""

    context: Path
    dockerfile: str
    service: str
    args: tuple[tuple[str, str], ...] = ()
    target: str | None = None


class ImageBuilder:
    """Builds and caches task images; one per backend (so per job)."""

    def __init__(self, engine: Engine, owner: str, cache_dir: Path, *,
                 overrides: dict[str, str] | None = None, force_build: bool = False,
                 max_builds: int = 2, build_args: dict[str, str] | None = None) -> None:
        self.engine = engine
        self.owner = owner
        self.lock_dir = cache_dir / "docker-builds"
        self.overrides = dict(overrides or {})
        #: `--build-arg`s, under a compose service's own build args.
        self.build_args = dict(build_args or {})
        self.force_build = force_build
        self._slots = asyncio.Semaphore(max_builds)
        self._locks: dict[str, asyncio.Lock] = {}
        self._built: set[str] = set()

    def tag(self, key: str) -> str:
        return f"{IMAGE_REPO}:{key}"

    async def _exists(self, tag: str) -> bool:
        from docker.errors import ImageNotFound, NotFound

        try:
            await self.engine.call(self.engine.api.inspect_image, tag)
            return True
        except (ImageNotFound, NotFound):
            return False

    async def image(self, spec: BuildSpec, digest: str, timeout_sec: float,
                    log_path: Path) -> str:
        """The tag of the image for `spec`, building it first if needed.

        Raises: TrialError BUILD_FAILED / BUILD_TIMEOUT.
        """
        key = image_key(digest, spec.service, spec.dockerfile, self.overrides,
                        {**self.build_args, **dict(spec.args)})
        tag = self.tag(key)
        fresh = key in self._built or not self.force_build
        if fresh and await self._exists(tag):
            write_atomic(log_path, f"using the cached image {tag}\n")
            return tag
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            fresh = key in self._built or not self.force_build
            if fresh and await self._exists(tag):
                write_atomic(log_path, f"using the cached image {tag}\n")
                return tag
            self.lock_dir.mkdir(parents=True, exist_ok=True)
            async with file_lock(self.lock_dir / f"{key}.lock"):
                # Another sandlot may have built it while we waited for the lock.
                if (fresh and await self._exists(tag)):
                    write_atomic(log_path, f"using the cached image {tag}\n")
                    return tag
                async with self._slots:
                    await self._build(spec, key, tag, timeout_sec, log_path)
                self._built.add(key)
        return tag

    async def _build(self, spec: BuildSpec, key: str, tag: str, timeout_sec: float,
                     log_path: Path) -> None:
        dockerfile_path = spec.context / spec.dockerfile
        try:
            text = dockerfile_path.read_text(encoding="utf-8")
        except OSError as exc:
            raise TrialError(ErrorKind.BUILD_FAILED, f"cannot read {spec.dockerfile}: {exc}",
                             "setup") from exc
        rewritten, instructions = rewrite_dockerfile(text, self.overrides)
        name = f".sandlot-{key}.Dockerfile"
        token = secrets.token_hex(8)
        mark = f"no_proxy=sandlot-build-{token}"
        params: dict[str, Any] = {
            "t": tag, "dockerfile": name, "rm": "1", "forcerm": "1",
            "labels": json.dumps({OWNER_LABEL: self.owner, ROLE_LABEL: "image",
                                  KEY_LABEL: key}),
            "buildargs": json.dumps({**self.build_args, **dict(spec.args),
                                     "no_proxy": mark.split("=", 1)[1]}),
        }
        if self.force_build:
            params["nocache"] = "1"
        if spec.target:
            params["target"] = spec.target
        context = await self.engine.call(build_context, spec.context, rewritten, name)
        log: list[str] = [f"building {tag} from {spec.context} ({spec.dockerfile})\n"]
        error: str | None = None
        started = time.monotonic()
        try:
            async with asyncio.timeout(timeout_sec):
                async for item in self.engine.stream_json(
                        "POST", "/build", params, context,
                        {"Content-Type": "application/x-tar"}):
                    if "stream" in item:
                        log.append(str(item["stream"]))
                    if item.get("error") or item.get("errorDetail"):
                        error = str(item.get("error") or item["errorDetail"].get("message"))
                        log.append(f"ERROR: {error}\n")
        except TimeoutError:
            await self.engine.call(kill_marked, mark)
            where = _failing_line("".join(log), instructions)
            line = f" (at Dockerfile line {where})" if where else ""
            raise TrialError(ErrorKind.BUILD_TIMEOUT,
                             f"building the image took longer than {timeout_sec:g}s "
                             f"(build_timeout_sec){line}", "setup") from None
        except asyncio.CancelledError:
            await asyncio.shield(self.engine.call(kill_marked, mark))
            raise
        except TrialError:
            raise
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            log.append(f"ERROR: {error}\n")
        finally:
            context.close()
            log.append(f"build ended after {time.monotonic() - started:.1f}s\n")
            write_atomic(log_path, "".join(log))
        if error is None and not await self._exists(tag):
            error = "the engine reported no error but the image is missing"
        if error is not None:
            text_log = "".join(log)
            where = _failing_line(text_log, instructions)
            prefix = f"Dockerfile line {where} failed" if where else "the image build failed"
            hint = ""
            if re.search(r"pull|manifest|registry|resolv|name unknown|not found", error, re.I):
                hint = ("; if the base image cannot be pulled here, build or load it locally "
                        "and pass --base-image-override OLD=NEW")
            tail = text_log.strip()[-LOG_TAIL:]
            raise TrialError(ErrorKind.BUILD_FAILED, f"{prefix}: {error.strip()}{hint}\n{tail}",
                             "setup")

    async def pull_plain_http(self, ref: str, timeout_sec: float) -> None:
        """A base image on a registry spoken to over plain HTTP (one on loopback, or an
        --insecure-registry), pulled before the build if missing. Docker does so itself
        for loopback; Podman needs to be told (its libpod pull with tlsVerify=false), or
        the build's own pull fails on TLS."""
        if not self.engine.is_podman or await self._exists(ref):
            return
        api = self.engine.api

        def pull() -> None:
            response = api._post(api._url("/libpod/images/pull"), params={
                "reference": ref, "tlsVerify": "false", "policy": "missing", "quiet": "true"})
            body = api._result(response, json=False)
            for line in body.splitlines():
                with contextlib.suppress(ValueError):
                    item = json.loads(line)
                    if isinstance(item, dict) and item.get("error"):
                        raise RuntimeError(str(item["error"]))

        await self._pull(ref, timeout_sec, pull,
                         f"cannot pull {ref} over plain HTTP: {{exc}}; if the base image "
                         "cannot be pulled here, build or load it locally and pass "
                         "--base-image-override OLD=NEW")

    async def _pull(self, ref: str, timeout_sec: float, pull: Callable[[], object],
                    failure: str) -> None:
        """Run `pull` in the engine's thread within the build slots and the timeout;
        `failure` ({exc}: the engine's words) is the build_failed message."""
        try:
            async with asyncio.timeout(timeout_sec), self._slots:
                await self.engine.call(pull)
        except TimeoutError:
            raise TrialError(ErrorKind.BUILD_TIMEOUT, f"pulling {ref} took longer than "
                             f"{timeout_sec:g}s", "setup") from None
        except Exception as exc:
            raise TrialError(ErrorKind.BUILD_FAILED, failure.replace("{exc}", str(exc)),
                             "setup") from exc

    async def _inspect(self, ref: str) -> dict[str, Any]:
        """The engine's inspection of an image; empty when it has none of that name."""
        from docker.errors import ImageNotFound, NotFound

        try:
            return dict(await self.engine.call(self.engine.api.inspect_image, ref))
        except (ImageNotFound, NotFound):
            return {}

    async def image_config(self, ref: str) -> ImageConfig:
        """What an image's config says its containers start with (WORKDIR, USER, ...)."""
        config = (await self._inspect(ref)).get("Config")
        return ImageConfig.from_oci(config if isinstance(config, dict) else {})

    async def repo_digest(self, ref: str) -> str | None:
        """The manifest digest the engine pulled `ref` at (its RepoDigests), if known."""
        info = await self._inspect(ref)
        digests = [str(d).split("@", 1) for d in info.get("RepoDigests") or [] if "@" in str(d)]
        try:
            repository = parse_image_ref(ref).repository
        except ImageReferenceError:
            repository = ""
        # `python` is `docker.io/library/python` to Podman: match on the repository's end.
        candidates = ([d for name, d in digests if repository and name.endswith(repository)]
                      or [d for _, d in digests])
        if len(candidates) > 1 and self.engine.is_podman:
            # Podman lists a multi-platform image's index and its platform manifest, in
            # no fixed order; the digest it was pulled by (the index's, as Docker keeps
            # it and as the local sandbox names it) is libpod's own `Digest`.
            pulled_by = await self._podman_digest(ref)
            if pulled_by in candidates:
                return pulled_by
        return candidates[0] if candidates else None

    async def _podman_digest(self, ref: str) -> str | None:
        """libpod's `Digest` of an image: the manifest digest it was pulled by."""
        api = self.engine.api

        def inspect() -> object:
            response = api._get(api._url("/libpod/images/{0}/json", ref))
            return api._result(response, json=True)

        try:
            info = await self.engine.call(inspect)
        except Exception:  # an older Podman, or the image went: RepoDigests' first then
            return None
        digest = info.get("Digest") if isinstance(info, dict) else None
        return digest if isinstance(digest, str) else None

    async def pull_if_missing(self, ref: str, timeout_sec: float) -> str:
        """An image a compose service names (after overrides), pulled if not present."""
        ref = override_image(ref, self.overrides)
        if await self._exists(ref):
            return ref
        await self._pull(ref, timeout_sec, lambda: self.engine.client.images.pull(ref),
                         f"image {ref} is not here and cannot be pulled ({{exc}}); load it "
                         f"or pass --base-image-override {ref}=<a local image>")
        return ref
