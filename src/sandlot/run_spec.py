"""What `sandlot run` was asked to do: its flags and, with `--config FILE`, a job file
(YAML, TOML or JSON) that has one key per flag.

Precedence, highest first: a flag on the command line, the file's key, the flag's
environment variable (SANDLOT_IMAGE_POLICY...), the default. A job file is written for
one job while an environment variable is ambient, so the file wins over the
environment; a flag typed now wins over both. A repeatable flag given on the command
line replaces the file's list for that key (it does not add to it).

Relative paths in a file are relative to the file's folder, so a job file works from
wherever it is run. The job folder keeps the resolved settings as `job.yaml`: absolute
paths, the job's name and each dataset's version, so `sandlot run --config
jobs/<job>/job.yaml` resumes exactly that job.
"""

from __future__ import annotations

import difflib
import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

#: The run command's parameter names that are not their key (everything else is).
PARAMETER_KEYS = {"tasks_dirs": "tasks", "json_summary": "json"}

#: Keys whose flag is not "--" + the key with dashes.
FLAG_NAMES = {"tasks": "TASKS", "json": "--json"}


class RunSpecError(ValueError):
    """A job file or flag value that cannot be used; the message names where and how to
    fix it."""


class RunSpec(BaseModel):
    """Every setting of `sandlot run`, one key per flag (the flag's long name with '_' for
    '-'); the default is the flag's."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    tasks: list[Path] = Field(default_factory=list, description="Task folders or folders of "
                              "tasks (the command's TASKS arguments).")
    agent: str | None = None
    redact_env: list[str] = Field(default_factory=list)
    agents_file: Path | None = None
    agent_version: str | None = None
    model: str | None = None
    api_base: str | None = None
    api_key_env: str | None = None
    scripts_dir: list[Path] = Field(default_factory=list)
    max_turns: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    max_output_tokens: int | None = Field(default=None, ge=1)
    reasoning_effort: str | None = None
    seed: int | None = None
    model_kwarg: list[str] = Field(default_factory=list)
    repair_attempts: int = Field(default=0, ge=0)
    repair_template: Path | None = None
    n_concurrent: int = Field(default=1, ge=1)
    n_attempts: int = Field(default=1, ge=1)
    jobs_dir: Path = Path("jobs")
    job_name: str | None = None
    max_retries: int = Field(default=0, ge=0)
    max_trial_tokens: int | None = Field(default=None, ge=1)
    max_trial_cost_usd: float | None = Field(default=None, ge=0.000001)
    max_job_tokens: int | None = Field(default=None, ge=1)
    max_job_cost_usd: float | None = Field(default=None, ge=0.000001)
    dataset: list[str] = Field(default_factory=list)
    registry_path: list[Path] = Field(default_factory=list)
    registry_url: list[str] = Field(default_factory=list)
    include: list[str] = Field(default_factory=list)
    exclude: list[str] = Field(default_factory=list)
    n_tasks: int | None = Field(default=None, ge=1)
    timeout_multiplier: float = Field(default=1.0, ge=0.001)
    override_cpus: float | None = Field(default=None, ge=0.01)
    override_memory_mb: int | None = Field(default=None, ge=16)
    override_storage_mb: int | None = Field(default=None, ge=16)
    agent_network: Literal["none", "public"] | None = None
    allow_private_network: bool = False
    sandbox: str = "local"
    ray: str | None = Field(default=None, min_length=1)
    max_copy_out_mb: int = Field(default=100, ge=1)
    verifier_mode: str = "task"
    force_build: bool = False
    base_image_override: list[str] = Field(default_factory=list)
    build_arg: list[str] = Field(default_factory=list)
    image_policy: str = "auto"
    image_cache_max_gb: float = Field(default=20.0, ge=0)
    insecure_registry: list[str] = Field(default_factory=list)
    cache_dir: Path | None = None
    quiet: bool = False
    json_events: bool = False
    json_summary: bool = Field(default=False, alias="json")
    heartbeat_sec: float = Field(default=30.0, ge=0)
    stall_after_sec: float = Field(default=300.0, ge=1)
    no_preflight: bool = False
    max_error_rate: float = Field(default=0.5, ge=0.0, le=1.0)


def run_keys() -> list[str]:
    """Every key a job file may have, in the order of `sandlot run --help`."""
    return [f.alias or name for name, f in RunSpec.model_fields.items()]


def _path_keys() -> frozenset[str]:
    """Keys whose values are paths (or lists of paths): relative ones in a file are
    resolved against the file's folder."""
    def has_path(annotation: Any) -> bool:
        return annotation is Path or any(has_path(a) for a in get_args(annotation))

    return frozenset(f.alias or name for name, f in RunSpec.model_fields.items()
                     if has_path(f.annotation))


def _list_keys() -> frozenset[str]:
    return frozenset(f.alias or name for name, f in RunSpec.model_fields.items()
                     if get_origin(f.annotation) is list)


def flag_name(key: str) -> str:
    return FLAG_NAMES.get(key, "--" + key.replace("_", "-"))


@dataclass(frozen=True)
class ResolvedRun:
    """The settings of one run and where each came from, so that a complaint about a
    value names what the user wrote: the flag, or the key in the file."""

    spec: RunSpec
    file: Path | None = None
    from_file: frozenset[str] = frozenset()

    def where(self, key: str) -> str:
        """`--agent-network`, or `agent_network in job.yaml`."""
        if key in self.from_file and self.file is not None:
            return f"{key} in {self.file}"
        return flag_name(key)


def read_job_file(path: Path) -> dict[str, Any]:
    """The file's keys: YAML (.yaml/.yml), TOML (.toml) or JSON (.json); one mapping."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise RunSpecError(f"--config {path}: cannot read it ({why})") from None
    suffix = path.suffix.lower()
    try:
        if suffix == ".toml":
            data: object = tomllib.loads(text)
        elif suffix == ".json":
            data = json.loads(text)
        else:
            data = yaml.safe_load(text)
    except (yaml.YAMLError, tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        kind = {".toml": "TOML", ".json": "JSON"}.get(suffix, "YAML")
        detail = " ".join(str(exc).split())
        raise RunSpecError(f"--config {path}: not valid {kind} ({detail})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise RunSpecError(f"--config {path}: the file must be a mapping of settings "
                           f"(key: value), not a {type(data).__name__}")
    return data


def file_values(path: Path, data: Mapping[str, Any]) -> dict[str, Any]:
    """The file's settings checked by name, with relative paths made absolute against
    the file's folder. A key that is not a setting is refused, naming the closest one
    (or the sandlot key for a Harbor job file's key)."""
    keys = run_keys()
    out: dict[str, Any] = {}
    for key, value in data.items():
        if not isinstance(key, str) or key not in keys:
            raise RunSpecError(f"--config {path}: {key!r} is not a setting; "
                               f"{_closest(str(key), keys)}")
        if key in _path_keys() and value is not None:
            value = _resolved_paths(path.parent, value)
        if isinstance(value, dict) and key in ("build_arg", "base_image_override",
                                                "model_kwarg"):
            value = [f"{k}={_text(v)}" for k, v in value.items()]  # NAME: VALUE reads better
        elif isinstance(value, str) and key in _list_keys():
            value = [value]  # one task folder or dataset needs no list
        out[key] = value
    return out


def resolve_run(given: Mapping[str, Any], environment: Mapping[str, Any],
                config: Path | None) -> ResolvedRun:
    """One RunSpec from the flags typed (`given`), the job file and the flags' environment
    variables (`environment`), in that order of precedence."""
    from_file: dict[str, Any] = {}
    if config is not None:
        config = config.expanduser().resolve()
        from_file = file_values(config, read_job_file(config))
    values = {**environment, **from_file, **given}
    by_file = frozenset(k for k in from_file if k not in given)
    try:
        spec = RunSpec.model_validate(values)
    except ValidationError as exc:
        resolved = ResolvedRun(RunSpec(), config, by_file)
        raise RunSpecError(_say_invalid(exc, resolved)) from None
    return ResolvedRun(spec, config, by_file)


def _say_invalid(exc: ValidationError, resolved: ResolvedRun) -> str:
    lines = []
    for error in exc.errors()[:5]:
        key = str(error["loc"][0]) if error["loc"] else "?"
        got = error.get("input")
        shown = f" (got {got!r})" if not isinstance(got, dict | list) else ""
        lines.append(f"{resolved.where(key)}: {error['msg']}{shown}")
    more = f" (and {exc.error_count() - 5} more)" if exc.error_count() > 5 else ""
    return "; ".join(lines) + more


def dump_resolved(spec: RunSpec) -> str:
    """The YAML that `sandlot run --config` reads back into the same settings."""
    data = spec.model_dump(mode="json", by_alias=True)
    header = ("# The resolved settings of this job (flags, job file and defaults).\n"
              "# `sandlot run --config <this file>` resumes it; edit n_concurrent or\n"
              "# max_retries freely, other changes are refused on resume.\n")
    return header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def _text(value: Any) -> str:
    """A file's value as the command line would give it (JSON for anything not a string)."""
    return value if isinstance(value, str) else json.dumps(value)


def _resolved_paths(base: Path, value: Any) -> Any:
    if isinstance(value, str):
        return str((base / Path(value).expanduser()).resolve())
    if isinstance(value, list):
        return [_resolved_paths(base, v) for v in value]
    return value  # the wrong type: validation says so, naming the key


#: A Harbor job file's keys and what sandlot calls them.
HARBOR_KEYS = {
    "n_concurrent_trials": "n_concurrent", "agents": "agent (and model: one agent a job)",
    "datasets": "dataset (NAME@VERSION) with registry_path / registry_url, or tasks",
    "orchestrator": "n_concurrent", "retry": "max_retries",
    "environment": "sandbox, override_cpus, override_memory_mb, override_storage_mb",
    "verifier": "verifier_mode", "agent_timeout_multiplier": "timeout_multiplier",
}


def _closest(key: str, keys: list[str]) -> str:
    if key in HARBOR_KEYS:
        return f"this looks like a Harbor job file: sandlot's key is {HARBOR_KEYS[key]}"
    near = difflib.get_close_matches(key, keys, n=1)
    if near:
        return f"did you mean {near[0]}?"
    return "the settings are those of `sandlot run --help` (see docs/cli.md)"
