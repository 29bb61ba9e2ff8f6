"""Real git repositories on disk for the dataset tests (no git host is reachable here):
tasks committed in several commits, registries that point at them by file:// URL."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

GIT_ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
           "GIT_CONFIG_NOSYSTEM": "1"}


def git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          env=GIT_ENV, timeout=60, check=True)
    return proc.stdout.strip()


def new_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    return path


def commit(repo: Path, files: dict[str, str | None], message: str = "change") -> str:
    """Write (or, for None, delete) `files`, commit them all; the new commit's id."""
    for rel, content in files.items():
        path = repo / rel
        if content is None:
            git(repo, "rm", "-rq", rel)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        if rel.endswith(".sh"):
            path.chmod(0o755)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


def task_files(path: str, *, marker: str = "done") -> dict[str, str | None]:
    """A task at `path` whose solution writes `marker` to /app/out.txt and whose test
    passes on exactly that (so a run shows which commit's files it used)."""
    return {
        f"{path}/task.toml": 'version = "1.0"\n[agent]\ntimeout_sec = 60\n'
                             '[verifier]\ntimeout_sec = 60\n',
        f"{path}/instruction.md": f"Write {marker} to /app/out.txt.\n",
        f"{path}/environment/Dockerfile": "FROM debian:bookworm-slim\nWORKDIR /app\n",
        f"{path}/solution/solve.sh": f"#!/bin/bash\necho {marker} > /app/out.txt\n",
        f"{path}/tests/test.sh": "#!/bin/bash\n"
        f"if grep -qx {marker} /app/out.txt; then echo 1; else echo 0; fi "
        "> /logs/verifier/reward.txt\n",
    }


def registry_entry(name: str, version: str, tasks: list[tuple[str, str, str | None, str]],
                   description: str = "") -> dict[str, object]:
    """One dataset version; tasks are (name, git_url, commit, path)."""
    return {"name": name, "version": version, "description": description,
            "tasks": [{"name": n, "git_url": u, "git_commit_id": c, "path": p}
                      for n, u, c, p in tasks]}


def write_registry(path: Path, datasets: list[dict[str, object]]) -> Path:
    path.write_text(json.dumps(datasets, indent=1))
    return path


def refusing_git(folder: Path) -> Path:
    """A folder holding a `git` that refuses to run (and leaves a mark when asked): put
    first on PATH, it proves a run made no git call."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "git"
    script.write_text(f"#!/bin/sh\necho \"$@\" >> {folder / 'called'}\n"
                      "echo 'fatal: this test forbids git' >&2\nexit 1\n")
    script.chmod(0o755)
    return folder
