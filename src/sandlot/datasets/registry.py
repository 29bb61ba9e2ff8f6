"""Dataset registries in Harbor 0.26's format, and which dataset a name means.

A registry is a JSON list of datasets, each `{name, version, description, tasks: [{name,
git_url, git_commit_id, path}]}` (Harbor's `registry.json`). A user names a dataset as
`name` or `name@version`; without a version the newest is taken as Harbor takes it:
`head` if there is one, else the highest PEP 440 version, else the last one in text
order. Several registries can be consulted; the first that has the name answers (and
the answer says which one did), so a private registry listed first can shadow a public
dataset on purpose.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from packaging.version import InvalidVersion, Version
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

#: The version Harbor prefers over every numbered one (a dataset's moving tip).
HEAD = "head"


class RegistryTask(BaseModel):
    """One task of a dataset: a folder `path` in the git repository `git_url` at
    `git_commit_id` (Harbor: no commit means the repository's default branch tip; no
    `git_url` means a folder on this machine)."""

    model_config = ConfigDict(extra="ignore")

    name: str
    git_url: str | None = None
    git_commit_id: str | None = None
    path: str

    @model_validator(mode="after")
    def _path_inside_its_repository(self) -> RegistryTask:
        """A git task's path is normalised as Harbor does (`a/../b` is `b`); one that is
        absolute or climbs out of the repository is refused. Without `git_url` the path
        is a folder on this machine and is taken as written."""
        if self.git_url is None:
            return self
        path = PurePosixPath(self.path)
        if path.is_absolute():
            raise ValueError(f"path {self.path!r}: a git task's path must be relative to "
                             "its repository")
        parts: list[str] = []
        for part in path.parts:
            if part == "..":
                if not parts:
                    raise ValueError(f"path {self.path!r}: a git task's path must stay "
                                     "inside its repository")
                parts.pop()
            elif part != ".":
                parts.append(part)
        self.path = "/".join(parts) or "."
        return self


class RegistryDataset(BaseModel):
    """One version of one dataset. Harbor's `metrics` and any other key are ignored."""

    model_config = ConfigDict(extra="ignore")

    name: str = Field(min_length=1)
    version: str
    description: str = ""
    tasks: list[RegistryTask]

    @field_validator("version", mode="before")
    @classmethod
    def _version_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, (int, float)) else value

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"


@dataclass(frozen=True)
class Registry:
    """The datasets one registry lists, and where it was read from (a URL or a file)."""

    source: str
    datasets: tuple[RegistryDataset, ...]

    def versions(self, name: str) -> list[str]:
        return [d.version for d in self.datasets if d.name == name]

    def names(self) -> list[str]:
        return sorted({d.name for d in self.datasets})


class RegistryError(Exception):
    """A registry that cannot be read, or a dataset it does not have: one line for the
    user, naming the registry (and the closest names or the known versions)."""


@dataclass(frozen=True)
class ResolvedDataset:
    """The dataset a name meant: which registry answered, and whether the version was
    given or chosen as the newest (results record both)."""

    dataset: RegistryDataset
    source: str
    version_from: Literal["given", "newest"]


def parse_registry(text: str, source: str) -> Registry:
    """A registry's JSON text. Errors name `source`, and for a bad entry its index,
    dataset name and field."""
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RegistryError(f"registry {source}: not JSON (line {exc.lineno}, column "
                            f"{exc.colno}: {exc.msg})") from exc
    if not isinstance(rows, list):
        raise RegistryError(f"registry {source}: expected a JSON list of datasets, got "
                            f"{type(rows).__name__}")
    datasets = []
    for i, row in enumerate(rows):
        try:
            datasets.append(RegistryDataset.model_validate(row))
        except ValidationError as exc:
            name = row.get("name") if isinstance(row, dict) else None
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise RegistryError(
                f"registry {source}: dataset #{i}{f' ({name})' if name else ''}: "
                f"{where}: {first['msg']}") from exc
    return Registry(source, tuple(datasets))


def read_registry_file(path: Path) -> Registry:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RegistryError(f"registry {path}: cannot read it ({exc.strerror or exc})"
                            ) from exc
    return parse_registry(text, str(path))


def split_ref(ref: str) -> tuple[str, str | None]:
    """`name@version` -> (name, version); `name` -> (name, None). Split at the first `@`,
    as Harbor does."""
    name, sep, version = ref.partition("@")
    if not name or (sep and not version):
        raise RegistryError(f"{ref!r} is not a dataset name: use NAME or NAME@VERSION")
    return name, version if sep else None


def newest_version(versions: Sequence[str]) -> str:
    """Harbor's choice: `head`, else the highest PEP 440 version, else the last in text
    order."""
    if not versions:
        raise ValueError("no versions")
    if HEAD in versions:
        return HEAD
    numbered: list[tuple[Version, str]] = []
    for v in versions:
        try:
            numbered.append((Version(v), v))
        except InvalidVersion:
            continue
    if numbered:
        return max(numbered, key=lambda pair: pair[0])[1]
    return max(versions)


def resolve_dataset(registries: Sequence[Registry], ref: str) -> ResolvedDataset:
    """The dataset `ref` names in the first registry that has its name. An unknown name
    lists the closest known ones; an unknown version lists the versions there are."""
    name, version = split_ref(ref)
    for registry in registries:
        versions = registry.versions(name)
        if not versions:
            continue
        chosen = version if version is not None else newest_version(versions)
        if chosen not in versions:
            known = ", ".join(sorted(versions, key=version_order))
            raise RegistryError(f"dataset {name} has no version {chosen} in registry "
                                f"{registry.source} (versions: {known})")
        dataset = next(d for d in registry.datasets
                       if d.name == name and d.version == chosen)
        return ResolvedDataset(dataset, registry.source,
                               "given" if version is not None else "newest")
    known = sorted({n for r in registries for n in r.names()})
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    where = ", ".join(r.source for r in registries) or "no registry"
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise RegistryError(f"no dataset named {name} in {where}{hint}")


def version_order(version: str) -> tuple[int, Any]:
    try:
        return (0, Version(version))
    except InvalidVersion:
        return (1, version)
