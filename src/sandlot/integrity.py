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
from collections.abc import Callable
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
#: Folders only the verifier's own processes see (mounted for test.sh alone), and /proc,
#: whose per-process links (/proc/self/root, /proc/<pid>/cwd) reach them from anywhere. A
#: link the agent left that leads there is read in test.sh's view: `answer.txt ->
#: /tests/expected.txt` would hand the tests their own answer.
VERIFY_ONLY = ("/tests", "/logs/verifier", "/proc")
LINK_INTO_VERIFIER = "link into the verifier's own folders"
#: Links followed resolving one path, as the kernel's own limit (ELOOP past it).
MAX_LINKS = 40


@dataclass(frozen=True)
class Finding:
    path: str
    reason: str


def _inside(path: str, folder: str) -> bool:
    folder = folder.rstrip("/") or "/"
    return path == folder or path.startswith(folder + "/")


def resolve_link(path: str, readlink: Callable[[str], str | None],
                 max_links: int = MAX_LINKS) -> str | None:
    """Where `path` leads in the sandbox's tree, every link on the way (the last one too)
    followed as the sandbox's kernel would. `readlink(p)` answers for a path whose folders
    are already resolved: the link's text, or None for anything else (missing included:
    the rest is then taken as written). Resolution stops at the first VERIFY_ONLY folder
    it enters (nothing there is followed). None when the links do not end (a loop)."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    resolved: list[str] = []
    links = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        here = "/" + "/".join([*resolved, part])
        if _in_any(here, VERIFY_ONLY):
            return posixpath.normpath("/".join([here, *parts]))
        target = readlink(here)
        if target is None:
            resolved.append(part)
            continue
        links += 1
        if links > max_links:
            return None
        if target.startswith("/"):
            resolved = []
        parts = [p for p in target.split("/") if p not in ("", ".")] + parts
    return "/" + "/".join(resolved)


def _in_any(path: str, folders: tuple[str, ...]) -> bool:
    return any(_inside(path, folder) for folder in folders)


def find_planted_hooks(changes: list[Any], workdir: str, read_text: Any = None,
                       exists: Any = None, readlink: Any = None) -> list[Finding]:
    """Changes (sandlot.sandbox.changes.Change) that would run inside the verifier.

    `read_text(path) -> str | None` lets .pth files be inspected (only those with an
    `import` line execute code); without it every changed .pth outside the workdir counts.
    `exists(path) -> bool | None` answers from the sandbox's own file tree (its image or
    layer, not the host's); a path it cannot answer for counts as present (the safe side).
    `readlink(path) -> str | None` (see resolve_link) lets links be followed: a changed
    link that leads into a VERIFY_ONLY folder is found wherever it is, the workdir too.
    """
    found: list[Finding] = []
    changed = {c.path: c.kind for c in changes}
    for path, kind in changed.items():
        if kind == "deleted":
            continue
        folder, name = posixpath.split(path)
        if readlink is not None and readlink(path) is not None:
            leads = resolve_link(path, readlink)
            if leads is None or _in_any(leads, VERIFY_ONLY):
                found.append(Finding(path, f"{LINK_INTO_VERIFIER} "
                                           f"({leads or 'a loop of links'})"))
                continue
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


@dataclass(frozen=True)
class SandboxReader:
    """The sandbox's own file tree read from the host (through `host_path`), as the
    checks above ask for it. Without a host view every answer is "unknown", which each
    check takes for the safe side."""

    host_path: Callable[[str], Any] | None

    def read_text(self, path: str) -> str | None:
        # The agent's file: no link followed, no FIFO opened, at most 1 MB. A file it
        # cannot read that way answers None, which every check takes as a hook.
        if self.host_path is None:
            return None
        try:
            data = read_regular(Path(self.host_path("/")), path, HOOK_FILE_MAX_BYTES)
        except (OSError, SandboxError, CapExceeded):
            return None
        return data.decode(errors="replace") if data is not None else None

    def exists(self, path: str) -> bool | None:
        if self.host_path is None:
            return None
        try:
            where = Path(self.host_path(path))
        except (SandboxError, OSError):  # a path the backend cannot map: unknown
            return None
        return os.path.lexists(where)  # the last link not followed: it may lead out

    def readlink(self, path: str) -> str | None:
        # Callers pass paths whose folders are resolved (no link on the way), so this
        # reads the sandbox's own entry; a /proc path is never asked for (VERIFY_ONLY).
        if self.host_path is None:
            return None
        try:
            return os.readlink(Path(self.host_path("/")) / path.lstrip("/"))
        except (OSError, SandboxError):  # not a link, missing, or no view
            return None


async def neutralize_planted_hooks(sandbox: Any, workdir: str) -> list[dict[str, str]]:
    """Find and undo planted hooks in `sandbox`; returns what was done (for result.json).
    A backend that cannot tell what changed (no TracksChanges) has nothing found."""
    if not isinstance(sandbox, TracksChanges):
        return []
    changes = await sandbox.changes()
    if not changes:
        return []
    view = SandboxReader(getattr(sandbox, "host_path", None))
    # Off the event loop: the reads are the agent's files (bounded, but disk-bound).
    findings = await asyncio.to_thread(find_planted_hooks, changes, workdir, view.read_text,
                                       view.exists, view.readlink)
    done = []
    for finding in findings:
        await sandbox.restore(finding.path)
        done.append({"path": finding.path, "reason": finding.reason,
                     "action": "restored to the environment's version or removed"})
    return done


async def links_back(sandbox: Any, removed: list[str]) -> list[str]:
    """Which of the `removed` links into a VERIFY_ONLY folder are back after the tests
    ran: something the agent left running made them again while they did. Only those
    paths are looked at, since test.sh itself may link into /tests (a fixture folder)."""
    if not removed:
        return []
    view = SandboxReader(getattr(sandbox, "host_path", None))

    def find() -> list[str]:
        found = []
        for path in removed:
            if view.readlink(path) is None:
                continue
            leads = resolve_link(path, view.readlink)
            if leads is None or _in_any(leads, VERIFY_ONLY):
                found.append(path)
        return found

    return await asyncio.to_thread(find)
