"""A multi-step task's steps, as Harbor 0.26 lays them out and sandlot runs them.

    steps/<name>/instruction.md     the step's instruction (required)
    steps/<name>/tests/             laid over the task's tests/ in /tests; its test.sh,
                                    else the task's, scores the step
    steps/<name>/solution/solve.sh  the oracle's solution of the step, else the task's
    steps/<name>/workdir/           copied into the working folder before the step;
                                    its setup.sh, if any, then runs there

A step's `[steps.agent]` and `[steps.verifier]` keys override the task's `[agent]` and
`[verifier]` (the verifier's env is merged, the step's winning); what a step does not
set is the task's. A step collects the task's `artifacts` and its own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from sandlot.tasks.config import StepSection, TaskConfig
from sandlot.tasks.loader import Task

STEPS_DIR = "steps"

def step_dir(task_path: Path, name: str) -> Path:
    return task_path / STEPS_DIR / name


def merged_config(config: TaskConfig, step: StepSection) -> TaskConfig:
    """`config` with the step's own agent and verifier keys laid over the task's."""
    agent = config.agent.model_copy(update={
        key: getattr(step.agent, key) for key in step.agent.model_fields_set})
    verifier_keys = {key: getattr(step.verifier, key)
                     for key in step.verifier.model_fields_set if key != "env"}
    verifier = config.verifier.model_copy(update={
        **verifier_keys, "env": {**config.verifier.env, **step.verifier.env}})
    return config.model_copy(update={"agent": agent, "verifier": verifier,
                                     "artifacts": [*config.artifacts, *step.artifacts]})


def step_task(task: Task, step: StepSection) -> Task:
    """`task` as `step` sees it: its instruction, tests, solution and settings."""
    base = step_dir(task.path, step.name)
    tests = tuple(d for d in (task.tests_dir, base / "tests") if d.is_dir())
    solution = base / "solution"
    return replace(task, config=merged_config(task.config, step),
                   instruction=(base / "instruction.md").read_text(encoding="utf-8"),
                   step=step.name, tests_sources_override=tests,
                   solution_override=solution if solution.is_dir() else None)


@dataclass(frozen=True)
class StepFileProblem:
    file: str
    message: str
    fix: str
    severity: str = "error"


def _inside(path: Path, root: Path) -> bool:
    return path.resolve().is_relative_to(root.resolve())


def check_step_files(task_path: Path, config: TaskConfig, *,
                     need_solution: bool) -> list[StepFileProblem]:
    """What each step needs on disk: its folder (inside the task), a non-empty
    instruction.md, a test.sh (its own or the task's) and, for the oracle, a solve.sh."""
    out: list[StepFileProblem] = []
    top_test = (task_path / "tests" / "test.sh").is_file()
    top_solve = (task_path / "solution" / "solve.sh").is_file()
    for step in config.steps or []:
        rel = f"{STEPS_DIR}/{step.name}"
        folder = step_dir(task_path, step.name)
        if not folder.is_dir():
            out.append(StepFileProblem(rel, "missing: the step has no folder", f"create {rel}/ "
                                       "with the step's instruction.md"))
            continue
        if not _inside(folder, task_path):
            out.append(StepFileProblem(rel, "leads outside the task folder (a link)",
                                       f"make {rel} a plain folder"))
            continue
        instruction = folder / "instruction.md"
        if not instruction.is_file():
            out.append(StepFileProblem(f"{rel}/instruction.md", "missing",
                                       "write the step's instructions there"))
        else:
            try:
                empty = not instruction.read_text(encoding="utf-8").strip()
            except (UnicodeDecodeError, OSError) as exc:
                out.append(StepFileProblem(f"{rel}/instruction.md", f"unreadable: {exc}",
                                           "save it as UTF-8 text"))
            else:
                if empty:
                    out.append(StepFileProblem(f"{rel}/instruction.md", "empty",
                                               "write the step's instructions there"))
        if not (folder / "tests" / "test.sh").is_file() and not top_test:
            out.append(StepFileProblem(f"{rel}/tests/test.sh", "missing, and the task has "
                                       "no tests/test.sh to fall back on",
                                       f"add {rel}/tests/test.sh or tests/test.sh"))
        solution = folder / "solution"
        if solution.is_dir() and not (solution / "solve.sh").is_file():
            out.append(StepFileProblem(f"{rel}/solution/solve.sh", "missing, though the "
                                       "step has a solution/ folder", f"add {rel}/solution/"
                                       "solve.sh (the oracle runs it for this step)",
                                       "error" if need_solution else "warning"))
        elif not solution.is_dir() and not top_solve:
            out.append(StepFileProblem(f"{rel}/solution/solve.sh", "missing, and the task "
                                       "has no solution/solve.sh to fall back on",
                                       f"add {rel}/solution/solve.sh or solution/solve.sh",
                                       "error" if need_solution else "warning"))
        for sub in ("tests", "solution", "workdir"):
            inner = folder / sub
            if inner.exists() and not _inside(inner, folder):
                out.append(StepFileProblem(f"{rel}/{sub}", "leads outside the step's folder "
                                           "(a link)", f"make {rel}/{sub} a plain folder"))
    return out
