"""task.toml (Harbor schema 1.4) as pydantic models: the one place that knows the schema.

Every key Harbor 0.26 defines is a field here, so a key that is not is a typo or a
dataset's own addition: it is kept (`model_extra`) and reported as a warning naming the
closest known key (`unknown_keys`). Whether sandlot honours a field is decided elsewhere
(tasks.check); this module only says what the file means.
"""

from __future__ import annotations

import datetime as dt
import difflib
import re
from pathlib import PurePosixPath
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    model_validator,
)
from pydantic_core import PydanticCustomError

from sandlot.tasks.hosts import normalize_allowed_host
from sandlot.tasks.step_names import step_name_key, step_name_problem

DEFAULT_TIMEOUT_SEC = 600.0


def _not_a_bool(value: object) -> object:
    """TOML `true` is not a number, though pydantic's lax int/float would read it as 1."""
    if isinstance(value, bool):
        raise PydanticCustomError("number_type", "Input should be a number, not a boolean")
    return value


def _version_str(value: object) -> object:
    """`version = "1.0"`, `1.0`, `2` or a date all name a version: keep it as text."""
    if isinstance(value, bool):
        raise PydanticCustomError("string_type", "Input should be a version string, "
                                  "not a boolean")
    if isinstance(value, dt.date | dt.time):  # datetime is a date
        return value.isoformat()
    if isinstance(value, int | float):
        return str(value)
    return value


def _network_mode(value: object) -> object:
    """Harbor spells no network `no-network`; sandlot's older files say `none`."""
    return "none" if value == "no-network" else value


#: A finite number > 0 (not a boolean, not inf/nan).
PositiveFloat = Annotated[float, BeforeValidator(_not_a_bool),
                          Field(gt=0, allow_inf_nan=False)]
PositiveInt = Annotated[int, BeforeValidator(_not_a_bool), Field(gt=0)]
NonNegativeFloat = Annotated[float, BeforeValidator(_not_a_bool),
                             Field(ge=0, allow_inf_nan=False)]
VersionText = Annotated[str | None, BeforeValidator(_version_str)]
NetworkMode = Annotated[Literal["none", "public", "allowlist"], BeforeValidator(_network_mode)]
#: `allowed_hosts`: hostnames, `*.suffix` wildcards, IP addresses or CIDR ranges, each
#: checked and normalized as Harbor does (lower case, no trailing dot, compressed IPv6).
AllowedHosts = list[Annotated[str, AfterValidator(normalize_allowed_host)]]
#: A user or uid, optionally `:group`, as Docker's `--user` and USER take it. Strict: the
#: name goes into the sandbox's /etc/passwd and into lookups there.
USER_SPEC = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,31})?")


def _user_spec(value: object) -> object:
    """`user = "agent"`, `1000` or `"1000:1000"`, as Docker's `--user` takes it; kept as
    text. Checked strictly: the name goes into the sandbox's /etc/passwd."""
    if isinstance(value, bool):
        raise PydanticCustomError("user_type", "Input should be a user name or uid")
    if isinstance(value, int) and value >= 0:
        return str(value)
    if isinstance(value, str) and USER_SPEC.fullmatch(value):
        return value
    raise PydanticCustomError(
        "user_format", "Input should be a user name or uid, optionally :group "
        "(letters, digits, '_', '.', '-'; up to 32 each)")


#: A user name or a numeric uid (optionally `:group`), as Docker's `--user` takes it.
UserSpec = Annotated[str, BeforeValidator(_user_spec)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="allow", coerce_numbers_to_str=True)


class NetworkPolicySection(_Section):
    """`network_mode` with its `allowed_hosts`, as [environment], [agent], [verifier] and
    their per-step forms have them."""

    network_mode: NetworkMode | None = None
    allowed_hosts: AllowedHosts | None = None

    @model_validator(mode="after")
    def _hosts_only_for_an_allowlist(self) -> NetworkPolicySection:
        if self.allowed_hosts is not None and self.network_mode != "allowlist":
            raise PydanticCustomError(
                "allowed_hosts_without_allowlist",
                "allowed_hosts is only valid with network_mode = \"allowlist\"")
        return self


class HealthcheckSection(_Section):
    """Docker HEALTHCHECK's options: polled after the environment starts."""

    command: str
    interval_sec: PositiveFloat = 5.0
    timeout_sec: PositiveFloat = 30.0
    start_period_sec: NonNegativeFloat = 0.0
    start_interval_sec: PositiveFloat = 5.0
    retries: PositiveInt = 3


class TpuSection(_Section):
    type: str
    topology: str


class McpServerSection(_Section):
    """An MCP server the task offers its agent."""

    name: str
    transport: Literal["stdio", "sse", "streamable-http", "http"] = "sse"
    url: str | None = None
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    headers: dict[str, str] = Field(default_factory=dict)


class AgentSection(NetworkPolicySection):
    timeout_sec: PositiveFloat = DEFAULT_TIMEOUT_SEC
    user: UserSpec | None = None
    #: sandlot's own: the feedback an agent gets between repair attempts.
    repair_feedback_template: str | None = None
    #: sandlot's own: the ACP permission policy for this task.
    acp_permission: str | None = None


class EnvironmentSection(NetworkPolicySection):
    cpus: PositiveFloat | None = None
    memory_mb: PositiveInt | None = None
    #: Disk quota for what the sandbox writes (Harbor's field; enforced by the local backend).
    storage_mb: Annotated[int, Field(ge=16)] | None = None
    #: network_mode: `None` when the file does not say; the trial decides what that means.
    #: The older switch for the same thing (Harbor reads it when network_mode is unset).
    allow_internet: bool | None = None
    build_timeout_sec: PositiveFloat = DEFAULT_TIMEOUT_SEC
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None
    docker_image: str | None = None
    os: Annotated[Literal["linux", "windows"],
                  BeforeValidator(lambda v: v.lower() if isinstance(v, str) else v)] = "linux"
    gpus: Annotated[int, BeforeValidator(_not_a_bool), Field(ge=0)] | None = None
    gpu_types: list[str] | None = None
    tpu: TpuSection | None = None
    mcp_servers: list[McpServerSection] = Field(default_factory=list)
    skills_dir: str | None = None
    healthcheck: HealthcheckSection | None = None
    #: Deprecated spellings of memory_mb / storage_mb ("2G", "512M").
    memory: str | None = None
    storage: str | None = None


class VerifierCollectSection(_Section):
    command: str
    service: str = "main"
    timeout_sec: PositiveFloat = 60.0
    user: UserSpec | None = None


class VerifierSection(NetworkPolicySection):
    timeout_sec: PositiveFloat = DEFAULT_TIMEOUT_SEC
    env: dict[str, str] = Field(default_factory=dict)
    user: UserSpec | None = None
    environment_mode: Literal["shared", "separate"] | None = None
    environment: EnvironmentSection | None = None
    #: sandlot's own: paths (fnmatch patterns, or folders) the agent may change that the
    #: verifier loads without being asked (a pytest plugin the task asked for): kept in
    #: shared mode instead of put back.
    trusted_paths: list[Annotated[str, Field(pattern=r"^/")]] = Field(default_factory=list)
    collect: list[VerifierCollectSection] = Field(default_factory=list)


class SolutionSection(_Section):
    env: dict[str, str] = Field(default_factory=dict)


def _artifact_source(value: str) -> str:
    if any(part == ".." for part in PurePosixPath(value).parts):
        raise PydanticCustomError("artifact_source", "an artifact's source must not "
                                  "contain '..' (it names a path in the sandbox)")
    if not value.strip():
        raise PydanticCustomError("artifact_source", "an artifact's source is empty")
    return value


def _artifact_destination(value: str | None) -> str | None:
    """Harbor's rules: a relative path under the trial's artifacts folder, forward
    slashes, no '..', not the manifest's own name."""
    if not value:
        return None
    path = PurePosixPath(value)
    if "\\" in value or path.is_absolute() or any(part == ".." for part in path.parts):
        raise PydanticCustomError("artifact_destination", "an artifact's destination is "
                                  "a relative path with forward slashes and no '..' (it "
                                  "goes under the trial's artifacts folder)")
    if value.rstrip("/") == "manifest.json":
        raise PydanticCustomError("artifact_destination", "the destination manifest.json "
                                  "is the collection's own manifest: choose another name")
    return value


class ArtifactSection(_Section):
    source: Annotated[str, AfterValidator(_artifact_source)]
    destination: Annotated[str | None, AfterValidator(_artifact_destination)] = None
    exclude: list[str] = Field(default_factory=list)
    service: str | None = None


def _step_name(value: object) -> object:
    """A step's name is its folder's (steps/<name>/): portable on every OS."""
    if isinstance(value, str) and (problem := step_name_problem(value)) is not None:
        raise PydanticCustomError("step_name", problem)
    return value


FiniteFloat = Annotated[float, BeforeValidator(_not_a_bool), Field(allow_inf_nan=False)]


def _artifact_table(value: object) -> object:
    """`"/var/log/x"` is short for `{ source = "/var/log/x" }`."""
    return {"source": value} if isinstance(value, str) else value


#: An `artifacts` entry: a path, or a table with its destination and exclusions.
ArtifactItem = Annotated[ArtifactSection, BeforeValidator(_artifact_table)]


class StepSection(_Section):
    name: Annotated[str, AfterValidator(_step_name)]
    agent: AgentSection = Field(default_factory=AgentSection)
    verifier: VerifierSection = Field(default_factory=VerifierSection)
    #: Stop the steps after this one unless its rewards reach it (a number: `reward`).
    min_reward: FiniteFloat | dict[str, FiniteFloat] | None = None
    healthcheck: HealthcheckSection | None = None
    artifacts: list[ArtifactItem] = Field(default_factory=list)


class AuthorSection(_Section):
    name: str
    email: str | None = None


class PackageSection(_Section):
    """[task]: the package's registry identity."""

    name: str
    version: VersionText = None
    description: str = ""
    authors: list[AuthorSection] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)


class TaskConfig(_Section):
    """The whole task.toml."""

    #: Any TOML scalar but a boolean (a string, a number, a date), kept as text. Harbor
    #: renamed it `schema_version`; both are read.
    version: VersionText = None
    schema_version: VersionText = None
    task: PackageSection | None = None
    source: str | None = None
    metadata: dict[str, object] = Field(default_factory=dict)
    agent: AgentSection = Field(default_factory=AgentSection)
    verifier: VerifierSection = Field(default_factory=VerifierSection)
    environment: EnvironmentSection = Field(default_factory=EnvironmentSection)
    solution: SolutionSection = Field(default_factory=SolutionSection)
    multi_step_reward_strategy: Literal["mean", "final"] | None = None
    steps: list[StepSection] | None = None
    artifacts: list[ArtifactItem] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_step_names(self) -> TaskConfig:
        """Two steps may not share a folder, even on a case-insensitive filesystem."""
        seen: dict[str, str] = {}
        for step in self.steps or []:
            key = step_name_key(step.name)
            if key in seen:
                raise PydanticCustomError(
                    "step_names", "step names must be unique (ignoring case): {a} and "
                    "{b} would share a folder", {"a": repr(seen[key]), "b": repr(step.name)})
            seen[key] = step.name
        return self

    @model_validator(mode="after")
    def _legacy_sizes(self) -> TaskConfig:
        """`memory = "2G"` / `storage = "512M"` (older files) fill memory_mb / storage_mb."""
        env = self.environment
        for old, new in (("memory", "memory_mb"), ("storage", "storage_mb")):
            text = getattr(env, old)
            if text is not None and getattr(env, new) is None:
                setattr(env, new, parse_size_mb(text, f"environment.{old}"))
        return self

    @property
    def network_mode(self) -> Literal["none", "public", "allowlist"]:
        """The environment's network: network_mode, else allow_internet, else none
        (each phase's own is sandlot.tasks.network's)."""
        env = self.environment
        if env.network_mode is not None:
            return env.network_mode
        if env.allow_internet is not None:
            return "public" if env.allow_internet else "none"
        return "none"


def parse_size_mb(text: str, field: str) -> int:
    """"2G" -> 2048, "512M" -> 512, "1024K" -> 1 (Harbor's rule for the old fields)."""
    units = {"G": 1024.0, "M": 1.0, "K": 1 / 1024}
    cleaned = text.strip().upper()
    try:
        return int(float(cleaned[:-1]) * units[cleaned[-1:]])
    except (KeyError, ValueError):
        raise PydanticCustomError(
            "size_format", "{field} must be a size like '2G' or '512M', got {text!r}",
            {"field": field, "text": text}) from None


def unknown_keys(data: dict[str, object]) -> list[tuple[str, str | None]]:
    """Every key of the raw TOML that the schema does not define, as (dotted path,
    closest known key or None). Free-form tables (metadata, env, headers) are not read."""
    out: list[tuple[str, str | None]] = []
    _walk(TaskConfig, data, (), out)
    return out


_FREE_FORM = frozenset({"metadata", "env", "headers"})


def _walk(model: type[BaseModel], data: object, where: tuple[str, ...],
          out: list[tuple[str, str | None]]) -> None:
    if not isinstance(data, dict):
        return
    known = list(model.model_fields)
    for key, value in data.items():
        path = (*where, str(key))
        if key not in model.model_fields:
            close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
            out.append((".".join(path), ".".join((*where, close[0])) if close else None))
            continue
        if key in _FREE_FORM:
            continue
        for sub in _section_types(model.model_fields[key].annotation):
            items = value if isinstance(value, list) else [value]
            for i, item in enumerate(items):
                index = (f"{key}[{i}]",) if isinstance(value, list) else (str(key),)
                _walk(sub, item, (*where, *index), out)


def _section_types(annotation: object) -> list[type[BaseModel]]:
    """The section models inside a field's type (`X | None`, `list[str | X]`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in getattr(annotation, "__args__", ()):
        found.extend(_section_types(arg))
    return found
