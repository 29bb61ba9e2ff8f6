"""Validate task folders and explain each problem: which file, which field, what to do."""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from sandlot.errors import TaskLoadError
from sandlot.tasks.config import TaskConfig, unknown_keys
from sandlot.tasks.dockerfile import USE_CONTAINER, CopyStep, parse_dockerfile
from sandlot.tasks.naming import task_name
from sandlot.tasks.steps import check_step_files
from sandlot.tasks.support import unsupported
from sandlot.tasks.templates import missing_variables
from sandlot.tasks.trust import untrusted_reads

#: Backends that build the task's image themselves: compose files and every Dockerfile
#: feature are theirs to honour (the engine reports what it cannot build).
CONTAINER_BACKENDS = frozenset({"docker"})


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
_SIMPLE_KEY = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|'[^']*')"""
_DOTTED_KEY = rf"{_SIMPLE_KEY}(?:\s*\.\s*{_SIMPLE_KEY})*"
_KEY_PART = re.compile(_SIMPLE_KEY)
_ASSIGNMENT = re.compile(rf"({_DOTTED_KEY})\s*=")
_TABLE = re.compile(rf"\[\s*({_DOTTED_KEY})\s*\]\s*(?:#.*)?$")
_ARRAY_TABLE = re.compile(rf"\[\[\s*({_DOTTED_KEY})\s*\]\]")


def _key_path(dotted: str) -> tuple[str, ...]:
    """`a."b.c".'d'` -> ("a", "b.c", "d")."""
    parts = []
    for m in _KEY_PART.finditer(dotted):
        part = m.group(0)
        if part.startswith('"'):
            try:
                part = tomllib.loads(f"k = {part}")["k"]
            except tomllib.TOMLDecodeError:
                part = part[1:-1]
        elif part.startswith("'"):
            part = part[1:-1]
        parts.append(part)
    return tuple(parts)


def _key_line(text: str, loc: tuple[str | int, ...]) -> int | None:
    """Line defining a pydantic error location: its `[table]` header, `key = ...` under
    the table, a dotted key (`agent.timeout_sec = ...` at top level, `b.c = ...` in [a]),
    or the one-line inline table holding it (`env = { A = [1] }`)."""
    if not loc:
        return None
    want = tuple(str(x) for x in loc)
    current: tuple[str, ...] | None = ()
    for no, line in enumerate(text.split("\n"), start=1):
        s = line.strip()
        if s.startswith("[["):  # an array of tables: its keys' locations carry an index
            m = _ARRAY_TABLE.match(s)
            current = None
            if m and _key_path(m.group(1)) == want:
                return no
            continue
        if s.startswith("["):
            m = _TABLE.match(s)
            current = _key_path(m.group(1)) if m else None
            if current == want:
                return no
            continue
        m = _ASSIGNMENT.match(s)
        if m and current is not None:
            path = current + _key_path(m.group(1))
            if path == want:
                return no
            if want[:len(path)] == path and s[m.end():].lstrip().startswith("{"):
                return no  # inside the inline table that starts on this line
    return None


def _fix_for(err: dict[str, object], field: str) -> str:
    kind = str(err.get("type", ""))
    if any(word in kind for word in ("float", "int", "number", "greater_than", "finite")):
        if field.endswith("timeout_sec"):
            return f"set {field} to a positive number of seconds, e.g. {field} = 600"
        if field.endswith("storage_mb"):
            return f"set {field} to a disk size in MB of at least 16, e.g. {field} = 10240"
        return f"set {field} to a positive number"
    if kind == "literal_error":
        ctx = err.get("ctx")
        expected = str(ctx.get("expected", "")) if isinstance(ctx, dict) else ""
        allowed = re.findall(r"'((?:[^'\\]|\\.)*)'", expected)
        if allowed:
            return "use one of: " + ", ".join(json.dumps(a) for a in allowed)
        return f"use one of the allowed values for {field}"
    if "dict" in kind or "model" in kind:
        return f"make {field} a table, e.g. [{field}]"
    if "string" in kind:
        return f"quote the value of {field} as a string"
    return f"correct {field}"


def _not_utf8(task: str, file: str, path: Path, exc: UnicodeDecodeError,
              why: str = "") -> Problem:
    """`file` could not be decoded; name the line of the first bad byte."""
    before = path.read_bytes()[:exc.start].replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    line = before.count(b"\n") + 1
    return Problem(task, file, f"line {line}",
                   f"{file} is not UTF-8 (byte {exc.object[exc.start]:#04x} at offset "
                   f"{exc.start} cannot be decoded){why}",
                   f"re-save {file} as UTF-8 (e.g. iconv -f latin1 -t utf-8)")


def _read_utf8(path: Path) -> str:
    """The text sandlot reads everywhere: strict UTF-8, universal newlines."""
    return path.read_text(encoding="utf-8")


def _check_toml(task: str, path: Path, oracle: bool = True) -> list[Problem]:
    try:
        text = _read_utf8(path)
    except UnicodeDecodeError as exc:
        return [_not_utf8(task, "task.toml", path, exc, "; TOML requires UTF-8")]
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = _TOML_LINE.search(str(exc))
        field = f"line {m.group(1)}" if m else None
        return [Problem(task, "task.toml", field, f"invalid TOML: {exc}",
                        "fix the TOML syntax at that line "
                        "(quote strings, one key = value per line)")]
    problems = [_unknown_key(task, text, path, close) for path, close in unknown_keys(data)]
    try:
        config = TaskConfig.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            loc = tuple(err["loc"])
            field = ".".join(str(x) for x in loc)
            line = _key_line(text, loc)
            where = f"{field} (line {line})" if line else field
            problems.append(Problem(task, "task.toml", where,
                                    f"{err['msg']}, got {err.get('input')!r}",
                                    _fix_for(dict(err), field)))
        return problems
    tests_dockerfile = (path.parent / "tests" / "Dockerfile").is_file()
    for gap in unsupported(config, oracle=oracle, tests_dockerfile=tests_dockerfile):
        line = _field_line(text, gap.field)
        where = f"{gap.field} (line {line})" if line else gap.field
        problems.append(Problem(task, "task.toml", where, gap.reason, gap.fix))
    for gap in missing_variables(config):
        line = _key_line(text, tuple(gap.field.split(".")))
        where = f"{gap.field} (line {line})" if line else gap.field
        problems.append(Problem(task, "task.toml", where,
                                f"${{{gap.variable}}} is not set in sandlot's environment",
                                f"export {gap.variable}=... before the run, or give a default: "
                                f"${{{gap.variable}:-value}}"))
    return problems


def _field_line(text: str, field: str) -> int | None:
    """The line of a dotted field; inside an array of tables (`steps[1].agent.x`), the
    line of the nearest table that has one (a step's `[steps.agent]` header has no
    index, so its `[[steps]]` line is named)."""
    exact = _key_line(text, tuple(field.split(".")))
    m = re.match(r"(\w+)\[(\d+)\]", field)
    if exact is not None or m is None:
        return exact
    headers = [no for no, line in enumerate(text.split("\n"), start=1)
               if re.fullmatch(rf"\[\[\s*{m.group(1)}\s*\]\]\s*(#.*)?", line.strip())]
    index = int(m.group(2))
    return headers[index] if index < len(headers) else None


def _unknown_key(task: str, text: str, path: str, close: str | None) -> Problem:
    """A key the schema does not define: kept (datasets add their own), but a typo of a
    known key would silently do nothing, so say which one it looks like."""
    loc = tuple(part.split("[")[0] for part in path.split("."))
    # A key inside an array of tables has no line of its own: name its array's line.
    line = next((n for end in range(len(loc), 0, -1) if (n := _key_line(text, loc[:end]))),
                None)
    where = f"{path} (line {line})" if line else path
    if close:
        return Problem(task, "task.toml", where, f"unknown key; did you mean {close}?",
                       f"rename it to {close}, or ignore this if it is your dataset's own key",
                       "warning")
    return Problem(task, "task.toml", where, "unknown key (not in Harbor's task.toml schema "
                   "1.4); sandlot ignores it", "remove it, or ignore this if it is your "
                   "dataset's own key", "warning")


def _lenient_config(task_toml: Path) -> TaskConfig | None:
    """task.toml's settings when it is valid (its errors are reported by _check_toml)."""
    try:
        return TaskConfig.model_validate(tomllib.loads(task_toml.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, ValidationError):
        return None


def _prebuilt_image(task_toml: Path) -> str | None:
    """task.toml's `[environment] docker_image`, read leniently (its errors are reported
    with the rest of task.toml's)."""
    try:
        environment = tomllib.loads(task_toml.read_text(encoding="utf-8")).get("environment")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    image = environment.get("docker_image") if isinstance(environment, dict) else None
    return image if isinstance(image, str) and image.strip() else None


def _check_dockerfile(task: str, env_dir: Path, sandbox: str = "local",
                      prebuilt: str | None = None) -> list[Problem]:
    dockerfile = env_dir / "Dockerfile"
    problems: list[Problem] = []
    if prebuilt is not None:  # Harbor runs the prebuilt image and never builds this one
        if dockerfile.exists():
            problems.append(Problem(task, "environment/Dockerfile", None,
                                    f"not used: task.toml's docker_image names a prebuilt "
                                    f"image ({prebuilt})", "remove docker_image to build "
                                    "the Dockerfile instead", "warning"))
        return problems
    container = sandbox in CONTAINER_BACKENDS
    compose = any((env_dir / name).exists() for name in (
        "docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml"))
    if compose and not container:
        problems.append(Problem(task, "environment/docker-compose.yaml", None,
                                "multi-container environments need a container runtime",
                                "use a container backend (--sandbox docker) for this task"))
    if not dockerfile.exists():
        if not (compose and container):
            problems.append(Problem(
                task, "environment/Dockerfile", None,
                "no Dockerfile: the task runs on the bare host image" if not container else
                "no Dockerfile: the task runs in a plain debian:bookworm-slim container",
                "add environment/Dockerfile if the task needs files or packages", "warning"))
        return problems
    try:
        plan = parse_dockerfile(_read_utf8(dockerfile))
    except UnicodeDecodeError as exc:
        problems.append(_not_utf8(task, "environment/Dockerfile", dockerfile, exc))
        return problems
    env_root = env_dir.resolve()
    for issue in plan.issues:
        if container and issue.message.endswith(USE_CONTAINER):
            continue  # a local-sandbox limit: the container backend builds it as it is
        problems.append(Problem(task, "environment/Dockerfile", f"line {issue.line}",
                                issue.message, "rewrite that instruction"
                                if "container backend" not in issue.message
                                else "use a container backend"))
    for step in [step for stage in (*plan.stages, plan) for step in stage.steps]:
        if isinstance(step, CopyStep) and step.from_context:
            for src in step.sources:
                where = f"line {step.line}: COPY {src}"
                if any(ch in src for ch in "*?["):
                    if not _glob_inside(env_root, src):
                        problems.append(Problem(task, "environment/Dockerfile", where,
                                                "the pattern matches no file in environment/",
                                                "add the files or fix the pattern"))
                    continue
                target = (env_dir / src).resolve()
                if not target.is_relative_to(env_root) or not target.exists():
                    problems.append(Problem(task, "environment/Dockerfile", where,
                                            "the source does not exist inside environment/",
                                            "add it to environment/ or fix the path"))
    return problems


def _glob_inside(env_root: Path, pattern: str) -> bool:
    """Does the COPY pattern match a file inside environment/? (`/x/*`, `../*` match none.)"""
    try:
        matches = env_root.glob(pattern)
        return any(m.resolve().is_relative_to(env_root) for m in matches)
    except (ValueError, NotImplementedError):  # absolute or empty patterns
        return False


def check_task(path: Path, *, need_solution: bool = True, sandbox: str = "local",
               trust: bool = False) -> list[Problem]:
    """Every problem of one task folder; an empty list means it can run on `sandbox`.

    The local sandbox refuses docker-compose tasks and the Dockerfile features it cannot
    replay; a container backend (--sandbox docker) accepts them. `trust` adds warnings
    for what tests/test.sh reads that the agent can write (`sandlot tasks check`).
    """
    task = task_name(path)
    toml_path = path / "task.toml"
    if not toml_path.is_file():
        if (path / "task.yaml").is_file():  # Terminal-Bench 1's layout, not Harbor's
            return [Problem(task, "task.toml", None, "missing: this is a Terminal-Bench 1 "
                            "task (task.yaml, run-tests.sh, solution.sh)",
                            "convert it to the Harbor layout with Harbor's terminal-bench "
                            "adapter, or use the dataset's Harbor version")]
        return [Problem(task, "task.toml", None, "missing", "create task.toml (see docs/tasks.md)")]
    problems = _check_toml(task, toml_path, oracle=need_solution)
    config = _lenient_config(toml_path)
    if config is not None and config.steps:
        problems.extend(Problem(task, p.file, None, p.message, p.fix, p.severity)  # type: ignore[arg-type]
                        for p in check_step_files(path, config, need_solution=need_solution))
        problems.extend(_check_dockerfile(task, path / "environment", sandbox,
                                          _prebuilt_image(path / "task.toml")))
        return problems
    instruction = path / "instruction.md"
    if not instruction.is_file():
        problems.append(Problem(task, "instruction.md", None, "missing",
                                "write the agent's instructions to instruction.md"))
    else:
        try:
            if not _read_utf8(instruction).strip():
                problems.append(Problem(task, "instruction.md", None, "empty",
                                        "write the agent's instructions to instruction.md"))
        except UnicodeDecodeError as exc:
            problems.append(_not_utf8(task, "instruction.md", instruction, exc))
    test_sh = path / "tests" / "test.sh"
    if not test_sh.is_file():
        problems.append(Problem(task, "tests/test.sh", None, "missing",
                                "add tests/test.sh that writes /logs/verifier/reward.txt"))
    solve_sh = path / "solution" / "solve.sh"
    if not solve_sh.is_file():
        problems.append(Problem(task, "solution/solve.sh", None, "missing",
                                "add solution/solve.sh (the reference solution the oracle runs)",
                                "error" if need_solution else "warning"))
    problems.extend(_check_dockerfile(task, path / "environment", sandbox,
                                      _prebuilt_image(path / "task.toml")))
    if trust and test_sh.is_file() and not any(p.severity == "error" for p in problems):
        problems.extend(_check_trust(task, path, test_sh, sandbox))
    return problems


def _check_trust(task: str, path: Path, test_sh: Path, sandbox: str) -> list[Problem]:
    """What test.sh reads that the agent can write, as warnings (sandlot.tasks.trust)."""
    from sandlot.tasks.loader import load_task

    try:
        workdir = load_task(path, need_solution=False, sandbox=sandbox).workdir
        text = _read_utf8(test_sh)
    except (TaskLoadError, UnicodeDecodeError, OSError):
        return []
    return [Problem(task, "tests/test.sh", f"{u.what} (line {u.line})", u.message, u.fix,
                    "warning") for u in untrusted_reads(text, workdir)]


def check_tasks(paths: list[Path], *, need_solution: bool = True,
                sandbox: str = "local", trust: bool = False) -> list[Problem]:
    out: list[Problem] = []
    for p in paths:
        out.extend(check_task(p, need_solution=need_solution, sandbox=sandbox, trust=trust))
    return out
