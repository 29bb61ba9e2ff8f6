"""Shield the verifier from hooks an agent planted for it (reward hacking).

Before the scoring run, the trial lists what the agent changed outside its workdir and
puts back the environment's own version of anything that would run inside the verifier
instead of the agent's work: Python start-up hooks (sitecustomize.py, usercustomize.py,
.pth files with code), pytest configuration above /tests (where pytest looks for its
rootdir and conftest.py), and commands on PATH that shadow or replace the system's. What
was neutralised is recorded in result.json; docs/security.md says what a task author must
still guard (the workdir itself is the agent's work and is never touched).
"""

from __future__ import annotations

import asyncio
import os
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandlot.errors import SandboxError
from sandlot.sandbox.base import TracksChanges
from sandlot.sandbox.bounded_fs import CapExceeded, read_regular

PY_HOOKS = frozenset({"sitecustomize.py", "usercustomize.py"})
#: Files pytest reads from the ancestors of its arguments (/tests -> /).
PYTEST_FILES = frozenset({"conftest.py", "pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg",
                          "pyproject.toml"})
PATH_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
TESTS_ANCESTORS = ("/", "/tests")
#: Packages a verifier's pytest imports: a copy planted earlier on sys.path shadows them.
TEST_RUNNER_PACKAGES = frozenset({"pytest", "_pytest", "pluggy", "py", "iniconfig",
                                  "unittest", "coverage"})
#: Files a shell reads at start-up (a `bash -l` test.sh would run what they say).
SHELL_STARTUP = ("/etc/profile", "/etc/bash.bashrc", "/etc/environment", "/etc/bashrc",
                 "/root/.bashrc", "/root/.profile", "/root/.bash_profile", "/root/.bash_login")
GIT_CONFIGS = ("/etc/gitconfig", "/root/.gitconfig", "/root/.config/git/config")
GIT_HOOK_KEYS = ("fsmonitor", "hookspath", "sshcommand", "askpass")
#: The most of a changed file the hook check reads (a .pth, a git config).
HOOK_FILE_MAX_BYTES = 1_000_000


@dataclass(frozen=True)
class Finding:
    path: str
    reason: str


def _inside(path: str, folder: str) -> bool:
    folder = folder.rstrip("/") or "/"
    return path == folder or path.startswith(folder + "/")


def find_planted_hooks(changes: list[Any], workdir: str, read_text: Any = None,
                       exists: Any = None) -> list[Finding]:
    """Changes (sandlot.sandbox.changes.Change) that would run inside the verifier.

    `read_text(path) -> str | None` lets .pth files be inspected (only those with an
    `import` line execute code); without it every changed .pth outside the workdir counts.
    `exists(path) -> bool | None` answers from the sandbox's own file tree (its image or
    layer, not the host's); a path it cannot answer for counts as present (the safe side).
    """
    found: list[Finding] = []
    changed = {c.path: c.kind for c in changes}
    for path, kind in changed.items():
        if kind == "deleted":
            continue
        folder, name = posixpath.split(path)
        if name in PY_HOOKS:  # even in the workdir: a .pth or PYTHONPATH can reach it
            found.append(Finding(path, "Python start-up hook"))
            continue
        if _inside(path, workdir):
            continue
        site = _site_packages_part(path)
        if path == "/etc/ld.so.preload":
            found.append(Finding(path, "library preloaded into every process"))
        elif path in SHELL_STARTUP or folder == "/etc/profile.d":
            found.append(Finding(path, "shell start-up file"))
        elif path in GIT_CONFIGS and _mentions(path, read_text, GIT_HOOK_KEYS):
            found.append(Finding(path, "git configuration that runs commands"))
        elif site is not None and site.split("/", 1)[0] in TEST_RUNNER_PACKAGES:
            found.append(Finding(path, "test-runner package planted or edited"))
        elif site is not None and name == "entry_points.txt" and _mentions(
                path, read_text, ("[pytest11]",)):
            found.append(Finding(path, "pytest plugin entry point"))
        elif site is not None and kind == "modified":
            found.append(Finding(path, "edited library file"))
        elif name.endswith(".pth") and _adds_hook_folder(path, read_text):
            found.append(Finding(path, "Python .pth file pointing at start-up hooks"))
        elif name.endswith(".pth") and _executes(path, read_text):
            found.append(Finding(path, "Python .pth file that runs code"))
        elif name in PYTEST_FILES and folder in TESTS_ANCESTORS:
            found.append(Finding(path, "pytest configuration above /tests"))
        elif folder in PATH_DIRS:
            later = PATH_DIRS[PATH_DIRS.index(folder) + 1:]
            if kind == "modified":
                found.append(Finding(path, "replaced a system command"))
            elif any(changed.get(f"{d}/{name}") != "added" and _base_has(f"{d}/{name}", exists)
                     for d in later):
                found.append(Finding(path, "PATH shim shadowing a system command"))
    return sorted(found, key=lambda f: f.path)


def _site_packages_part(path: str) -> str | None:
    """The part of `path` after a site-packages or dist-packages folder, if any."""
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return None


def _mentions(path: str, read_text: Any, words: tuple[str, ...]) -> bool:
    text = read_text(path) if read_text is not None else None
    if text is None:
        return True
    lowered = text.lower()
    return any(word.lower() in lowered for word in words)


def _adds_hook_folder(path: str, read_text: Any) -> bool:
    """A path-only .pth (editable installs use them) that puts a folder holding a
    sitecustomize.py/usercustomize.py on sys.path."""
    text = read_text(path) if read_text is not None else None
    if not text:
        return False
    for line in text.splitlines():
        folder = line.strip()
        if not folder.startswith("/") or folder.startswith("#"):
            continue
        if any(read_text(f"{folder.rstrip('/')}/{hook}") is not None for hook in PY_HOOKS):
            return True
    return False


def _executes(path: str, read_text: Any) -> bool:
    if read_text is None:
        return True
    text = read_text(path)
    if text is None:
        return True
    return any(line.lstrip().startswith(("import ", "import\t")) for line in text.splitlines())


def _base_has(path: str, exists: Any) -> bool:
    """Whether the environment itself has `path`: present now and not added by the agent
    (the caller checks the latter), so present before the agent ran."""
    if exists is None:
        return True
    answer = exists(path)
    return True if answer is None else bool(answer)


async def neutralize_planted_hooks(sandbox: Any, workdir: str) -> list[dict[str, str]]:
    """Find and undo planted hooks in `sandbox`; returns what was done (for result.json).
    A backend that cannot tell what changed (no TracksChanges) has nothing found."""
    if not isinstance(sandbox, TracksChanges):
        return []
    changes = await sandbox.changes()
    if not changes:
        return []
    host_path = getattr(sandbox, "host_path", None)

    def read_text(path: str) -> str | None:
        # The agent's file: no link followed, no FIFO opened, at most 1 MB. A file it
        # cannot read that way answers None, which every check takes as a hook.
        if host_path is None:
            return None
        try:
            data = read_regular(Path(host_path("/")), path, HOOK_FILE_MAX_BYTES)
        except (OSError, SandboxError, CapExceeded):
            return None
        return data.decode(errors="replace") if data is not None else None

    def exists(path: str) -> bool | None:
        if host_path is None:
            return None
        try:
            where = Path(host_path(path))
        except (SandboxError, OSError):  # a path the backend cannot map: unknown
            return None
        return os.path.lexists(where)  # the last link not followed: it may lead out

    # Off the event loop: the reads are the agent's files (bounded, but disk-bound).
    findings = await asyncio.to_thread(find_planted_hooks, changes, workdir, read_text,
                                       exists)
    done = []
    for finding in findings:
        await sandbox.restore(finding.path)
        done.append({"path": finding.path, "reason": finding.reason,
                     "action": "restored to the environment's version or removed"})
    return done
