"""Find task folders and load one into a `Task` the rest of sandlot can run."""

from __future__ import annotations

import fnmatch
import hashlib
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sandlot.errors import TaskLoadError
from sandlot.tasks.config import TaskConfig
from sandlot.tasks.dockerfile import DockerfilePlan, parse_dockerfile
from sandlot.tasks.naming import task_name
from sandlot.tasks.templates import fill_templates

if TYPE_CHECKING:
    from sandlot.models import TaskSource

DEFAULT_WORKDIR = "/app"


@dataclass(frozen=True)
class Task:
    name: str
    path: Path
    config: TaskConfig
    instruction: str
    dockerfile: DockerfilePlan | None
    digest: str
    #: Why this task cannot run (each names file, field and fix); empty for a valid task.
    #: An invalid task still gets its trials, which end as `task_invalid` without starting
    #: a sandbox, so one bad task never stops the others.
    problems: tuple[str, ...] = ()
    #: The working folder its image sets (a prebuilt docker_image's, or the FROM image's
    #: when the Dockerfile sets none), once a sandbox of it has started (see `workdir`).
    image_workdir: str | None = None
    #: The user its image runs as (the FROM image's USER when the Dockerfile sets none),
    #: once a sandbox of it has started; None for root or not known.
    image_user: str | None = None
    #: A multi-step task as one step sees it (sandlot.tasks.steps.step_task): the step's
    #: name, the test folders laid into /tests in order, its own solution folder.
    step: str | None = None
    tests_sources_override: tuple[Path, ...] | None = None
    solution_override: Path | None = None
    #: Where a dataset's task came from (sandlot.models.TaskSource); None for a folder.
    source: TaskSource | None = None

    @property
    def prebuilt_image(self) -> str | None:
        """`[environment] docker_image`: the image the task runs in as it is (no build)."""
        return self.config.environment.docker_image or None

    @property
    def is_valid(self) -> bool:
        return not self.problems

    @property
    def environment_dir(self) -> Path:
        return self.path / "environment"

    @property
    def tests_dir(self) -> Path:
        return self.path / "tests"

    @property
    def tests_sources(self) -> tuple[Path, ...]:
        """The folders copied into /tests, later ones over earlier ones."""
        if self.tests_sources_override is not None:
            return self.tests_sources_override
        return (self.tests_dir,)

    @property
    def solution_dir(self) -> Path:
        return self.solution_override or self.path / "solution"

    @property
    def workdir(self) -> str:
        """task.toml's workdir, else the Dockerfile's last WORKDIR (or a prebuilt image's
        own), else /app."""
        return self.declared_workdir or self.image_workdir or DEFAULT_WORKDIR

    @property
    def declared_workdir(self) -> str | None:
        """The working folder the task's own files name; None when its image decides it
        (a prebuilt image's WORKDIR, or the FROM image's when the Dockerfile sets none:
        known once a sandbox of it starts)."""
        if self.config.environment.workdir:
            return self.config.environment.workdir
        if self.dockerfile and self.dockerfile.workdir:
            return self.dockerfile.workdir
        if self.prebuilt_image or (self.dockerfile and self.dockerfile.stage_root_image()
                                   not in (None, "scratch")):
            return None
        return DEFAULT_WORKDIR

    @property
    def agent_user(self) -> str | None:
        """Who the agent runs as: [agent] user, else the image's USER, else root."""
        return self.config.agent.user or self._image_user

    @property
    def verifier_user(self) -> str | None:
        """Who test.sh runs as: [verifier] user, else the image's USER, else root."""
        return self.config.verifier.user or self._image_user

    @property
    def _image_user(self) -> str | None:
        """The sandbox's word (the built image's USER, base image's included), else the
        Dockerfile's own USER."""
        return self.image_user or (self.dockerfile.user if self.dockerfile else None)

    @property
    def env(self) -> dict[str, str]:
        """Environment every phase sees: Dockerfile ENV, then task.toml [environment] env."""
        base = dict(self.dockerfile.env) if self.dockerfile else {}
        return {**base, **self.config.environment.env}


def hash_tree(root: Path) -> str:
    """Content digest of a folder (paths, modes, bytes), stable across machines."""
    h = hashlib.sha256()
    if not root.exists():
        return h.hexdigest()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            h.update(rel.encode() + b"\0")
            if p.is_symlink():
                h.update(b"L" + os.readlink(p).encode())
            else:
                h.update(oct(p.stat().st_mode & 0o777).encode())
                h.update(p.read_bytes())
            h.update(b"\0")
    return h.hexdigest()


def load_task(path: Path, *, need_solution: bool = True, sandbox: str = "local",
              build_args: dict[str, str] | None = None) -> Task:
    """Load a task that `check_task` found valid; raises TaskLoadError otherwise."""
    from sandlot.tasks.check import check_task

    problems = [p for p in check_task(path, need_solution=need_solution, sandbox=sandbox)
                if p.severity == "error"]
    if problems:
        raise TaskLoadError(problems)
    # Strict UTF-8, as check_task read them (TOML must be UTF-8; no locale-dependent decoding).
    config = fill_templates(TaskConfig.model_validate(
        tomllib.loads((path / "task.toml").read_text(encoding="utf-8"))))
    dockerfile_path = path / "environment" / "Dockerfile"
    # A prebuilt image (docker_image) is run as it is: its Dockerfile is not built.
    plan = (parse_dockerfile(dockerfile_path.read_text(encoding="utf-8"), build_args)
            if dockerfile_path.exists() and not config.environment.docker_image else None)
    return Task(
        name=task_name(path),
        path=path.resolve(),
        config=config,
        # A multi-step task's instructions are its steps' (sandlot.tasks.steps).
        instruction="" if config.steps else
        (path / "instruction.md").read_text(encoding="utf-8"),
        dockerfile=plan,
        digest=hash_tree(path / "environment"),
    )


def load_task_or_invalid(path: Path, *, need_solution: bool = True,
                         sandbox: str = "local",
                         build_args: dict[str, str] | None = None) -> Task:
    """The task, or a stand-in that carries its problems (see `Task.problems`)."""
    try:
        return load_task(path, need_solution=need_solution, sandbox=sandbox,
                         build_args=build_args)
    except TaskLoadError as exc:
        problems = tuple(str(p) for p in exc.problems)
    try:
        digest = hash_tree(path / "environment")
    except OSError:  # an unreadable file: the digest only keys caches and resumes
        digest = ""
    return invalid_task(task_name(path), path.resolve(), problems, digest=digest)


def invalid_task(name: str, path: Path, problems: tuple[str, ...], *,
                 digest: str = "", source: TaskSource | None = None) -> Task:
    """A stand-in for a task that cannot run: its trials end as task_invalid, naming
    `problems`, instead of the job stopping."""
    return Task(name=name, path=path, config=TaskConfig(), instruction="", dockerfile=None,
                digest=digest, problems=problems, source=source)


def discover_tasks(
    root: Path,
    include: list[str] | None = None,
    exclude: list[str] | None = None,
    n_tasks: int | None = None,
) -> list[Path]:
    """Every subfolder holding a task.toml (or `root` itself if it is one), filtered by name."""
    if (root / "task.toml").exists():
        found = [root]
    else:
        found = sorted(p.parent for p in root.glob("*/task.toml"))
    if include:
        found = [p for p in found if any(fnmatch.fnmatch(task_name(p), g) for g in include)]
    if exclude:
        found = [p for p in found
                 if not any(fnmatch.fnmatch(task_name(p), g) for g in exclude)]
    if n_tasks is not None:
        found = found[:n_tasks]
    return found
