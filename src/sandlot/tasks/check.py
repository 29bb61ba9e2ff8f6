"""Validate task folders and explain each problem: which file, which field, what to do."""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from sandlot.tasks.config import TaskConfig
from sandlot.tasks.dockerfile import ARCHIVE_SUFFIXES, CopyStep, parse_dockerfile


@dataclass(frozen=True)
class Problem:
    task: str
    file: str
    field: str | None
    message: str
    fix: str
    severity: Literal["error", "warning"] = "error"

    def __str__(self) -> str:
        where = f"{self.task}/{self.file}" + (f": {self.field}" if self.field else "")
        return f"{where}: {self.message} (fix: {self.fix})"


_TOML_LINE = re.compile(r"line (\d+)")


def _key_line(text: str, loc: tuple[str | int, ...]) -> int | None:
    """Line of `key = ...` inside `[table]` for a pydantic error location."""
    if not loc:
        return None
    *tables, key = [str(x) for x in loc]
    table = ".".join(tables)
    current = ""
    for no, line in enumerate(text.splitlines(), start=1):
        s = line.strip()
        if s.startswith("["):
            current = s.strip("[] ")
            if not tables and current == key:
                return no
            continue
        if current == table and re.match(rf'^"?{re.escape(key)}"?\s*=', s):
            return no
    return None


def _fix_for(err: dict[str, object], field: str) -> str:
    kind = str(err.get("type", ""))
    if "float" in kind or "int" in kind or "greater_than" in kind:
        if field.endswith("timeout_sec"):
            return f"set {field} to a positive number of seconds, e.g. {field} = 600"
        return f"set {field} to a positive number"
    if kind == "literal_error":
        return f"use one of the allowed values for {field}: {err.get('ctx', {})}"
    if "dict" in kind or "model" in kind:
        return f"make {field} a table, e.g. [{field}]"
    if "string" in kind:
        return f"quote the value of {field} as a string"
    return f"correct {field}"


def _check_toml(task: str, path: Path) -> list[Problem]:
    text = path.read_text(errors="replace")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = _TOML_LINE.search(str(exc))
        field = f"line {m.group(1)}" if m else None
        return [Problem(task, "task.toml", field, f"invalid TOML: {exc}",
                        "fix the TOML syntax at that line "
                        "(quote strings, one key = value per line)")]
    try:
        TaskConfig.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            field = ".".join(str(x) for x in loc)
            line = _key_line(text, loc)
            where = f"{field} (line {line})" if line else field
            problems.append(Problem(task, "task.toml", where,
                                    f"{err['msg']}, got {err.get('input')!r}",
                                    _fix_for(dict(err), field)))
        return problems
    return []


def _check_dockerfile(task: str, env_dir: Path) -> list[Problem]:
    dockerfile = env_dir / "Dockerfile"
    problems: list[Problem] = []
    if (env_dir / "docker-compose.yaml").exists() or (env_dir / "docker-compose.yml").exists():
        problems.append(Problem(task, "environment/docker-compose.yaml", None,
                                "multi-container environments need a container runtime",
                                "use a container backend (--sandbox docker) for this task"))
    if not dockerfile.exists():
        problems.append(Problem(task, "environment/Dockerfile", None,
                                "no Dockerfile: the task runs on the bare host image",
                                "add environment/Dockerfile if the task needs files or packages",
                                "warning"))
        return problems
    plan = parse_dockerfile(dockerfile.read_text(errors="replace"))
    for issue in plan.issues:
        problems.append(Problem(task, "environment/Dockerfile", f"line {issue.line}",
                                issue.message, "rewrite that instruction"
                                if "container backend" not in issue.message
                                else "use a container backend"))
    for step in plan.steps:
        if isinstance(step, CopyStep):
            for src in step.sources:
                if any(ch in src for ch in "*?["):
                    if not list(env_dir.glob(src)):
                        problems.append(Problem(task, "environment/Dockerfile", f"COPY {src}",
                                                "the pattern matches no file in environment/",
                                                "add the files or fix the pattern"))
                    continue
                target = (env_dir / src).resolve()
                if not str(target).startswith(str(env_dir.resolve())) or not target.exists():
                    problems.append(Problem(task, "environment/Dockerfile", f"COPY {src}",
                                            "the source does not exist inside environment/",
                                            "add it to environment/ or fix the path"))
                elif step.extract and not src.endswith(ARCHIVE_SUFFIXES):
                    continue
    return problems


def check_task(path: Path, *, need_solution: bool = True) -> list[Problem]:
    """Every problem of one task folder; an empty list means it can run."""
    task = path.name
    toml_path = path / "task.toml"
    if not toml_path.is_file():
        return [Problem(task, "task.toml", None, "missing", "create task.toml (see docs/tasks.md)")]
    problems = _check_toml(task, toml_path)
    instruction = path / "instruction.md"
    if not instruction.is_file():
        problems.append(Problem(task, "instruction.md", None, "missing",
                                "write the agent's instructions to instruction.md"))
    elif not instruction.read_text(errors="replace").strip():
        problems.append(Problem(task, "instruction.md", None, "empty",
                                "write the agent's instructions to instruction.md"))
    test_sh = path / "tests" / "test.sh"
    if not test_sh.is_file():
        problems.append(Problem(task, "tests/test.sh", None, "missing",
                                "add tests/test.sh that writes /logs/verifier/reward.txt"))
    elif not os.access(test_sh, os.X_OK):
        problems.append(Problem(task, "tests/test.sh", None, "not executable",
                                f"chmod +x {test_sh}"))
    solve_sh = path / "solution" / "solve.sh"
    if not solve_sh.is_file():
        problems.append(Problem(task, "solution/solve.sh", None, "missing",
                                "add solution/solve.sh (the reference solution the oracle runs)",
                                "error" if need_solution else "warning"))
    problems.extend(_check_dockerfile(task, path / "environment"))
    return problems


def check_tasks(paths: list[Path], *, need_solution: bool = True) -> list[Problem]:
    out: list[Problem] = []
    for p in paths:
        out.extend(check_task(p, need_solution=need_solution))
    return out
