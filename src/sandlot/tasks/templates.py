"""`${VAR}` and `${VAR:-default}` in task.toml's env tables, filled from sandlot's own
environment, as Harbor does: a task can ask for a value the user supplies at run time (an
API endpoint, a dataset path) without writing it into the file.

A value is a template only as a whole (`"${VAR}"`, not `"x-${VAR}"`), as in Harbor. A
template naming a variable that is not set and has no default cannot run: the task is
refused with the variable's name, never started with a literal `${VAR}`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from sandlot.tasks.config import TaskConfig

TEMPLATE = re.compile(r"\$\{([^}:]+)(?::-(.*))?\}")
#: The env tables templates are read in, by their place in task.toml.
ENV_TABLES = ("environment", "verifier", "solution")


@dataclass(frozen=True)
class MissingVariable:
    field: str
    variable: str


def missing_variables(config: TaskConfig,
                      environ: Mapping[str, str] = os.environ) -> list[MissingVariable]:
    """Every template whose variable is unset and has no default."""
    missing = []
    tables = [(table, getattr(config, table).env) for table in ENV_TABLES]
    tables += [(f"steps[{i}].verifier", step.verifier.env)
               for i, step in enumerate(config.steps or [])]
    for table, env in tables:
        for key, value in env.items():
            m = TEMPLATE.fullmatch(value)
            if m and m.group(1) not in environ and m.group(2) is None:
                missing.append(MissingVariable(f"{table}.env.{key}", m.group(1)))
    return missing


def fill_templates(config: TaskConfig,
                   environ: Mapping[str, str] = os.environ) -> TaskConfig:
    """`config` with its env templates filled in (call after `missing_variables` is empty).

    Raises: KeyError for a variable that is unset and has no default.
    """
    def fill(value: str) -> str:
        m = TEMPLATE.fullmatch(value)
        if m is None:
            return value
        if m.group(1) in environ:
            return environ[m.group(1)]
        if m.group(2) is not None:
            return m.group(2)
        raise KeyError(m.group(1))

    updates: dict[str, object] = {}
    for table in ENV_TABLES:
        section = getattr(config, table)
        filled = {key: fill(value) for key, value in section.env.items()}
        if filled != section.env:
            updates[table] = section.model_copy(update={"env": filled})
    if config.steps:
        updates["steps"] = [step.model_copy(update={"verifier": step.verifier.model_copy(
            update={"env": {k: fill(v) for k, v in step.verifier.env.items()}})})
            for step in config.steps]
    return config.model_copy(update=updates) if updates else config
