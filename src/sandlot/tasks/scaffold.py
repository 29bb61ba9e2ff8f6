"""`sandlot tasks init NAME`: a new task folder that already works.

Harbor's template is a skeleton of comments; a task author then has to learn the reward
files before anything passes. This one is a small complete task in schema 1.4 (write a
file, test it, write the reward) that passes `sandlot tasks check` and its own oracle as
generated, so the author edits a working task instead of debugging an empty one. Its
test needs nothing from the network, so it passes where nothing can be installed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

#: A task folder's name: it names the task's trial folders too.
FOLDER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
#: A registry identity, `org/name` (Harbor's [task] name).
PACKAGE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}/[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


class ScaffoldError(Exception):
    """The name or the place is not usable; one line saying what to do instead."""


@dataclass(frozen=True)
class TaskScaffold:
    """What `tasks init` writes: NAME is `name` or `org/name` (the folder is `name`;
    `org/name` also becomes the task's [task] name, as Harbor's init writes it)."""

    name: str
    description: str = ""
    authors: tuple[tuple[str, str | None], ...] = ()

    @property
    def folder_name(self) -> str:
        return self.name.rsplit("/", 1)[-1]

    def files(self) -> dict[str, str]:
        return {
            "task.toml": self._task_toml(),
            "instruction.md": INSTRUCTION,
            "environment/Dockerfile": DOCKERFILE,
            "solution/solve.sh": SOLVE_SH,
            "tests/test.sh": TEST_SH,
        }

    def _task_toml(self) -> str:
        lines = ['schema_version = "1.4"', ""]
        if "/" in self.name:
            lines += ["[task]", f"name = {_toml_text(self.name)}"]
            if self.description:
                lines.append(f"description = {_toml_text(self.description)}")
            if self.authors:
                lines.append("authors = [" + ", ".join(
                    f"{{ name = {_toml_text(n)}" + (f", email = {_toml_text(e)}" if e else "")
                    + " }" for n, e in self.authors) + "]")
            lines.append("")
        lines += ["[metadata]", 'difficulty = "easy"', 'category = "example"', "",
                  "[agent]", "timeout_sec = 600.0", "",
                  "[verifier]", "timeout_sec = 120.0", "",
                  "[environment]", "build_timeout_sec = 600.0", "cpus = 1",
                  "memory_mb = 2048", "storage_mb = 10240", ""]
        return "\n".join(lines)


def parse_author(text: str) -> tuple[str, str | None]:
    """`Name <email>` or `Name`, as Harbor's --author."""
    found = re.fullmatch(r"\s*(.+?)\s*<(.+?)>\s*", text)
    return (found.group(1), found.group(2)) if found else (text.strip(), None)


def write_scaffold(scaffold: TaskScaffold, tasks_dir: Path) -> Path:
    """The new task's folder under `tasks_dir`; an existing folder is never touched."""
    if not (FOLDER_NAME.fullmatch(scaffold.name) or PACKAGE_NAME.fullmatch(scaffold.name)):
        raise ScaffoldError(f"{scaffold.name[:120]!r} is not a task name: use NAME or "
                            "ORG/NAME, letters, digits, '.', '_' and '-' (NAME names the "
                            "folder)")
    folder = tasks_dir / scaffold.folder_name
    if folder.exists() or folder.is_symlink():
        raise ScaffoldError(f"{folder} already exists: choose another name or --tasks-dir "
                            "(nothing was written)")
    folder.mkdir(parents=True)
    for rel, text in scaffold.files().items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if rel.endswith(".sh"):
            path.chmod(0o755)
    return folder


def _toml_text(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


INSTRUCTION = """\
Create a file named `hello.txt` in the working directory (`/app`) that contains exactly
one line: `Hello, world!`
"""

DOCKERFILE = """\
# The agent's environment. Install what the task needs here; the tests get the same
# environment (or their own, with [verifier] environment_mode = "separate").
FROM debian:bookworm-slim

WORKDIR /app
"""

SOLVE_SH = """\
#!/bin/bash
# The reference solution: `sandlot run <tasks> --agent oracle` runs it instead of an
# agent, to check that the task can be solved and that its tests say so.
set -euo pipefail

echo "Hello, world!" > /app/hello.txt
"""

TEST_SH = """\
#!/bin/bash
# Runs after the agent, from the working directory. Writes the reward (0 or 1 here; any
# number, or several in /logs/verifier/reward.json) to /logs/verifier/reward.txt.

if [ "$(cat /app/hello.txt 2>/dev/null)" = "Hello, world!" ]; then
    echo "hello.txt says Hello, world!"
    echo 1 > /logs/verifier/reward.txt
else
    echo "hello.txt is missing or says something else"
    echo 0 > /logs/verifier/reward.txt
fi
"""
