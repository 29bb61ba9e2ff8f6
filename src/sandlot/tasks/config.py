"""task.toml as a pydantic model. Unknown keys are kept: datasets add their own freely."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

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


#: A finite number > 0 (not a boolean, not inf/nan).
PositiveFloat = Annotated[float, BeforeValidator(_not_a_bool),
                          Field(gt=0, allow_inf_nan=False)]
PositiveInt = Annotated[int, BeforeValidator(_not_a_bool), Field(gt=0)]


class _Section(BaseModel):
    model_config = ConfigDict(extra="allow", coerce_numbers_to_str=True)


class AgentSection(_Section):
    timeout_sec: PositiveFloat = DEFAULT_TIMEOUT_SEC


class VerifierSection(_Section):
    timeout_sec: PositiveFloat = DEFAULT_TIMEOUT_SEC
    env: dict[str, str] = Field(default_factory=dict)


class EnvironmentSection(_Section):
    cpus: PositiveFloat | None = None
    memory_mb: PositiveInt | None = None
    #: Disk quota for what the sandbox writes (Harbor's field; enforced by the local backend).
    storage_mb: Annotated[int, Field(ge=16)] | None = None
    network_mode: Literal["none", "public"] = "none"
    build_timeout_sec: PositiveFloat = DEFAULT_TIMEOUT_SEC
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None


class SolutionSection(_Section):
    env: dict[str, str] = Field(default_factory=dict)


class TaskConfig(_Section):
    """The whole task.toml."""

    #: Any TOML scalar but a boolean (a string, a number, a date), kept as text.
    version: Annotated[str | None, BeforeValidator(_version_str)] = None
    metadata: dict[str, object] = Field(default_factory=dict)
    agent: AgentSection = Field(default_factory=AgentSection)
    verifier: VerifierSection = Field(default_factory=VerifierSection)
    environment: EnvironmentSection = Field(default_factory=EnvironmentSection)
    solution: SolutionSection = Field(default_factory=SolutionSection)
