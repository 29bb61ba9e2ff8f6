"""task.toml as a pydantic model. Unknown keys are kept: datasets add their own freely."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_TIMEOUT_SEC = 600.0


class _Section(BaseModel):
    model_config = ConfigDict(extra="allow", coerce_numbers_to_str=True)


class AgentSection(_Section):
    timeout_sec: float = Field(default=DEFAULT_TIMEOUT_SEC, gt=0)


class VerifierSection(_Section):
    timeout_sec: float = Field(default=DEFAULT_TIMEOUT_SEC, gt=0)
    env: dict[str, str] = Field(default_factory=dict)


class EnvironmentSection(_Section):
    cpus: float | None = Field(default=None, gt=0)
    memory_mb: int | None = Field(default=None, gt=0)
    network_mode: Literal["none", "public"] = "none"
    build_timeout_sec: float = Field(default=DEFAULT_TIMEOUT_SEC, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None


class SolutionSection(_Section):
    env: dict[str, str] = Field(default_factory=dict)


class TaskConfig(_Section):
    """The whole task.toml."""

    version: str | float | None = None
    metadata: dict[str, object] = Field(default_factory=dict)
    agent: AgentSection = Field(default_factory=AgentSection)
    verifier: VerifierSection = Field(default_factory=VerifierSection)
    environment: EnvironmentSection = Field(default_factory=EnvironmentSection)
    solution: SolutionSection = Field(default_factory=SolutionSection)
