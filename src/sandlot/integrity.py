"""Shield the verifier's own machinery from what the agent changed (reward hacking).

Shared mode runs the tests in the sandbox the agent leaves. Before they run, the trial
lists what the agent changed outside its workdir and puts back the environment's own
version of whatever the verifier's processes would load *without being asked*: judged
against sandlot.machinery's answer from the pristine sandbox (the PATH folders where they
really are; each interpreter's import path, site folders, standard library, and the
modules it and its test runner load at start-up), plus the loader's and the package
installers' configuration. What the tests run or import by name (a new command, a new
package, an edited config, a vendored module) is the agent's work under test and stays.
What was put back is recorded in result.json; docs/security.md states the guarantees
and the limits; the separate verifier is the strong mode.
"""

from __future__ import annotations

import asyncio
import fnmatch
import os
import posixpath
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandlot.errors import SandboxError
from sandlot.machinery import RUNNER_PACKAGES, Machinery
from sandlot.sandbox.base import TracksChanges
from sandlot.sandbox.bounded_fs import CapExceeded, read_regular
from sandlot.sandbox.links import MAX_LINKS
from sandlot.sandbox.links import resolve_link as follow_links

#: Module names Python's `site` imports at every start-up, from anywhere on its path.
STARTUP_MODULES = re.compile(r"^(site|user)customize(\..*)?$")
#: Files pytest reads from the ancestors of its arguments (/tests -> /).
PYTEST_FILES = frozenset({"conftest.py", "pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg",
                          "pyproject.toml"})
TESTS_ANCESTORS = ("/", "/tests")
#: The dynamic loader's configuration: what it loads into every process, and where from.
LOADER_CONFIG = ("/etc/ld.so.preload", "/etc/ld.so.conf")
LOADER_CONFIG_DIR = "/etc/ld.so.conf.d"
LOADER_CACHE = "/etc/ld.so.cache"
#: A shared library in a folder the loader searches by default (real paths: /lib is
#: /usr/lib on a merged /usr).
LOADER_LIBRARY = re.compile(
    r"^/(usr/(local/)?)?lib(32|64|x32)?(/[^/]*-linux-gnu[^/]*)?/[^/]+\.so(\.[0-9.]+)?$")
#: The system's table of which program a command name runs (update-alternatives).
ALTERNATIVES = "/etc/alternatives"
#: Package installers' and runners' configuration, by name, wherever it is outside the
#: workdir (system, any home, a venv's own pip.conf): where the verifier's own `pip
#: install` gets code, which shell `npm test` runs scripts with, what wraps `rustc`.
INSTALLER_CONFIG_NAMES = frozenset({"pip.conf", "pip.ini", "uv.toml", ".npmrc", "npmrc",
                                    ".yarnrc", ".yarnrc.yml", ".condarc", ".pydistutils.cfg"})
INSTALLER_CONFIG_SUFFIXES = ("/.cargo/config", "/.cargo/config.toml")
#: What package installers reuse without checking it again, in any home: their caches
#: (a planted wheel or unpacked archive is taken as the one the index names), uv's own
#: Pythons and tool environments (`uvx -p 3.13 pytest` runs what it finds there). Put
#: back whole: the folder is the unit, its files are the installer's business.
INSTALLER_STATE = ("/.cache/pip", "/.cache/uv", "/.local/share/uv/python",
                   "/.local/share/uv/tools")
GIT_CONFIGS = ("/etc/gitconfig",)
GIT_HOME_CONFIGS = ("/.gitconfig", "/.config/git/config")
#: git settings that run a command (or read another file that may) on an ordinary call.
GIT_HOOK_KEYS = ("fsmonitor", "hookspath", "sshcommand", "askpass", "include", "filter",
                 "external", "textconv")
#: The most of a changed file the hook check reads (a .pth, a git config).
HOOK_FILE_MAX_BYTES = 1_000_000
#: Folders only the verifier's own processes see (mounted for test.sh alone), and /proc,
#: whose per-process links (/proc/self/root, /proc/<pid>/cwd) reach them from anywhere. A
#: link the agent left that leads there is read in test.sh's view: `answer.txt ->
#: /tests/expected.txt` would hand the tests their own answer.
VERIFY_ONLY = ("/tests", "/logs/verifier", "/proc")
LINK_INTO_VERIFIER = "link into the verifier's own folders"
#: The action of a finding the task trusts: reported, left as it is.
KEPT_TRUSTED = "kept: the task trusts it ([verifier] trusted_paths)"
#: Without a measured machinery: where Python's standard library and site folders are.
FALLBACK_STDLIB = re.compile(r"^/usr(/local)?/lib/python3(\.\d+)?/")
SITE_MARKERS = ("/site-packages/", "/dist-packages/")


@dataclass(frozen=True)
class Finding:
    path: str
    reason: str
    #: Matched by the task's `[verifier] trusted_paths`: reported, left as it is.
    trusted: bool = False


def _inside(path: str, folder: str) -> bool:
    folder = folder.rstrip("/") or "/"
    return path == folder or path.startswith(folder + "/")


def resolve_link(path: str, readlink: Callable[[str], str | None],
                 max_links: int = MAX_LINKS) -> str | None:
    """Where `path` leads, every link on the way (the last one too) followed, stopping at
    the first VERIFY_ONLY folder it enters (sandlot.sandbox.links)."""
    return follow_links(path, readlink, stop=VERIFY_ONLY, max_links=max_links)


def _in_any(path: str, folders: tuple[str, ...]) -> bool:
    return any(_inside(path, folder) for folder in folders)


def find_planted_hooks(changes: list[Any], workdir: str, read_text: Any = None,
                       exists: Any = None, readlink: Any = None,
                       machinery: Machinery | None = None,
                       trusted: tuple[str, ...] = (), is_dir: Any = None) -> list[Finding]:
    """Changes (sandlot.sandbox.changes.Change) the verifier's machinery would load.

    `machinery` is the pristine sandbox's answer (sandlot.machinery); without one, the
    static defaults (DEFAULT_PATH, Python's folders found by name). `read_text(path)`
    lets a .pth or a git config be read (unreadable counts as a hook). `exists(path)`
    answers from the sandbox's own tree; unknown counts as present (the safe side).
    `readlink(path)` (see resolve_link) lets links be followed; `is_dir(path)` tells a
    folder still there (an engine lists changed folders) from one replaced (unknown:
    replaced). A finding whose path a
    `trusted` pattern matches (fnmatch, or a folder above it) is marked, not dropped.
    """
    folders = _Folders.of(machinery or Machinery())
    found: dict[str, Finding] = {}
    changed = {c.path: c.kind for c in changes}
    for path, kind in changed.items():
        state = _installer_state(path)
        if state is not None:  # the installer's folder, put back whole
            path, reason = state, "package installer cache or managed install"
        else:
            reason = _judge(path, kind, changed, workdir, folders, read_text, exists,
                            readlink, is_dir)
        if reason is not None and path not in found:
            found[path] = Finding(path, reason, trusted=_trusted(path, trusted))
    return sorted(found.values(), key=lambda f: f.path)


def _installer_state(path: str) -> str | None:
    """The INSTALLER_STATE folder that holds `path`, if any."""
    for marker in INSTALLER_STATE:
        at = path.find(marker + "/")
        if at >= 0:
            return path[:at + len(marker)]
    return None


@dataclass(frozen=True)
class _Folders:
    """The machinery's folders, worked out once per check (it runs for every change)."""

    #: Every folder the verifier loads code from: PATH (as written and real), each
    #: interpreter's import path, site folders and standard library.
    loads_from: tuple[str, ...]
    #: Where the PATH folders really are, in PATH order, each once.
    path_dirs: tuple[str, ...]
    #: (folder, standard library?, the machinery's modules) per import-path folder,
    #: innermost first.
    imports: tuple[tuple[str, bool, frozenset[str]], ...]
    #: Whether any interpreter was measured (else Python's folders are found by name).
    measured_python: bool

    @classmethod
    def of(cls, machinery: Machinery) -> _Folders:
        loads_from = [d for pair in machinery.path_folders for d in pair]
        imports: dict[str, tuple[bool, frozenset[str]]] = {}
        for python in machinery.pythons:
            loads_from += [*python.sys_path, *python.site_dirs, *python.stdlib_dirs]
            loaded = python.loaded | RUNNER_PACKAGES
            for folder in {*python.sys_path, *python.site_dirs}:
                stdlib = folder not in python.site_dirs and _in_any(folder,
                                                                    python.stdlib_dirs)
                was_stdlib, was_loaded = imports.get(folder, (False, frozenset()))
                imports[folder] = (stdlib or was_stdlib, loaded | was_loaded)
        ordered = sorted(imports.items(), key=lambda item: -len(item[0]))
        return cls(tuple(loads_from), tuple(machinery.resolved_path_dirs),
                   tuple((f, stdlib, loaded) for f, (stdlib, loaded) in ordered),
                   bool(machinery.pythons))


def _leads_into_verifier(path: str, readlink: Callable[[str], str | None]) -> str | None:
    """Where the link at `path` leads, if that is a VERIFY_ONLY folder (or nowhere: a
    loop); None for anything else, a link that leads elsewhere included."""
    if readlink(path) is None:
        return None
    leads = resolve_link(path, readlink)
    if leads is None:
        return "a loop of links"
    return leads if _in_any(leads, VERIFY_ONLY) else None


def _judge(path: str, kind: str, changed: dict[str, str], workdir: str,
           folders: _Folders, read_text: Any, exists: Any, readlink: Any,
           is_dir: Any) -> str | None:
    """Why the verifier would load `path` without being asked, or None."""
    if kind != "deleted" and readlink is not None:
        leads = _leads_into_verifier(path, readlink)
        if leads is not None:
            return f"{LINK_INTO_VERIFIER} ({leads})"
    # A start-up module in any form (file, package, compiled), even in the workdir: a
    # .pth or an environment variable can put any folder on the import path.
    if kind != "deleted" and any(STARTUP_MODULES.match(p) for p in path.split("/")):
        return "Python start-up hook"
    if _inside(path, workdir):
        return None
    if any(_inside(folder, path) for folder in folders.loads_from) and (
            kind == "deleted" or is_dir is None or not is_dir(path)):
        return "a folder the verifier loads code from, replaced"
    reason = _python_reason(path, kind, folders, read_text)
    if reason is None:
        reason = _command_reason(path, kind, changed, folders, exists)
    if reason is None:
        reason = _config_reason(path, kind, read_text)
    return reason


def _python_reason(path: str, kind: str, folders: _Folders, read_text: Any) -> str | None:
    """A change on an interpreter's import path that it or its test runner loads."""
    place = _python_place(path, folders)
    if place is None:
        return None
    where, rel, loaded = place
    if where == "stdlib":
        return "the interpreter's standard library"
    name = posixpath.basename(rel)
    if "/" not in rel and name.endswith(".pth"):
        if kind != "deleted" and _executes(path, read_text):
            return "Python .pth file that runs code at every start-up"
        return None
    parts = rel.split("/")
    if (kind != "deleted" and name == "entry_points.txt" and len(parts) == 2
            and parts[0].endswith((".dist-info", ".egg-info"))
            and _mentions(path, read_text, ("[pytest11]",))):
        return "pytest plugin entry point (loaded by every pytest run)"
    top = _top_module(rel)
    if top in loaded:
        return f"part of the verifier's machinery (module {top})"
    return None


def _python_place(path: str, folders: _Folders,
                  ) -> tuple[str, str, frozenset[str]] | None:
    """(stdlib or site, the path inside that folder, the machinery's modules) for the
    innermost import-path folder of any interpreter that holds `path`."""
    for folder, stdlib, loaded in folders.imports:
        if path.startswith(folder.rstrip("/") + "/"):
            return ("stdlib" if stdlib else "site"), path[len(folder.rstrip("/")) + 1:], \
                loaded
    if folders.measured_python:
        return None
    for marker in SITE_MARKERS:  # not measured: the folders found by their names
        if marker in path:
            return "site", path.split(marker, 1)[1], RUNNER_PACKAGES
    if FALLBACK_STDLIB.match(path):
        return "stdlib", "", RUNNER_PACKAGES
    return None


def _top_module(rel: str) -> str:
    """The top-level module a file on the import path belongs to: `pytest/x.py`,
    `pytest.py`, `__pycache__/pytest.cpython-311.pyc` and `pytest.so` are all pytest."""
    parts = rel.split("/")
    first = parts[1] if parts[0] == "__pycache__" and len(parts) > 1 else parts[0]
    return first.split(".", 1)[0]


def _command_reason(path: str, kind: str, changed: dict[str, str], folders: _Folders,
                    exists: Any) -> str | None:
    """A command the verifier finds on PATH, replaced or shadowed; the loader's
    configuration and libraries; an alternatives link."""
    folder, name = posixpath.split(path)
    real_dirs = folders.path_dirs
    if folder in real_dirs:
        if kind != "added":
            return "replaced a system command"
        later = real_dirs[real_dirs.index(folder) + 1:]
        if any(changed.get(f"{d}/{name}") != "added" and _base_has(f"{d}/{name}", exists)
               for d in later):
            return "PATH shim shadowing a system command"
        return None
    if folder == ALTERNATIVES and kind != "added":
        return "alternatives link of a system command, replaced"
    if path in LOADER_CONFIG or folder == LOADER_CONFIG_DIR:
        return "dynamic loader configuration (what every process loads)"
    if path == LOADER_CACHE and kind != "added":
        return "dynamic loader cache"
    if kind != "added" and LOADER_LIBRARY.match(path):
        return "a library the loader loads without being asked, replaced"
    return None


def _config_reason(path: str, kind: str, read_text: Any) -> str | None:
    """Configuration the verifier's tools read without being asked."""
    folder, name = posixpath.split(path)
    if name in INSTALLER_CONFIG_NAMES or path.endswith(INSTALLER_CONFIG_SUFFIXES):
        return "package installer configuration (where the verifier's installs come from)"
    if kind != "deleted" and (path in GIT_CONFIGS or path.endswith(GIT_HOME_CONFIGS)) and \
            _mentions(path, read_text, GIT_HOOK_KEYS):
        return "git configuration that runs commands"
    if name in PYTEST_FILES and folder in TESTS_ANCESTORS:
        return "pytest configuration above /tests"
    return None


def _trusted(path: str, patterns: tuple[str, ...]) -> bool:
    here = path
    while here not in ("", "/"):
        if any(fnmatch.fnmatchcase(here, p.rstrip("/")) for p in patterns):
            return True
        here = posixpath.dirname(here)
    return False


def _mentions(path: str, read_text: Any, words: tuple[str, ...]) -> bool:
    text = read_text(path) if read_text is not None else None
    if text is None:
        return True
    lowered = text.lower()
    return any(word.lower() in lowered for word in words)


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

    def is_dir(self, path: str) -> bool:
        """A real folder at `path` (a link to one is not)."""
        if self.host_path is None:
            return False
        try:  # host_path resolves the folders on the way inside the sandbox
            return stat.S_ISDIR(os.lstat(self.host_path(path)).st_mode)
        except (OSError, SandboxError):
            return False

    def readlink(self, path: str) -> str | None:
        # Callers pass paths whose folders are resolved (no link on the way), so this
        # reads the sandbox's own entry; a /proc path is never asked for (VERIFY_ONLY).
        if self.host_path is None:
            return None
        try:
            return os.readlink(self.host_path(path))
        except (OSError, SandboxError):  # not a link, missing, or no view
            return None


async def neutralize_planted_hooks(sandbox: Any, workdir: str,
                                   machinery: Machinery | None = None,
                                   trusted: tuple[str, ...] = ()) -> list[dict[str, str]]:
    """Find and undo planted hooks in `sandbox`; returns what was found (for result.json):
    each put back, or kept where the task trusts its path. A backend that cannot tell
    what changed (no TracksChanges) has nothing found."""
    if not isinstance(sandbox, TracksChanges):
        return []
    changes = await sandbox.changes()
    if not changes:
        return []
    view = SandboxReader(getattr(sandbox, "host_path", None))
    # Off the event loop: the reads are the agent's files (bounded, but disk-bound).
    findings = await asyncio.to_thread(
        find_planted_hooks, changes, workdir, view.read_text, view.exists, view.readlink,
        machinery, trusted, view.is_dir)
    done = []
    for finding in findings:
        if finding.trusted:
            done.append({"path": finding.path, "reason": finding.reason,
                         "action": KEPT_TRUSTED})
            continue
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
        return [p for p in removed if _leads_into_verifier(p, view.readlink) is not None]

    return await asyncio.to_thread(find)
