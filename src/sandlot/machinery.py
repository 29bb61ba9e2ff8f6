"""Where the verifier's own machinery loads code without being asked, read from the
pristine sandbox.

Before the agent runs, the trial asks the sandbox itself, as the verifier would run (its
user, its environment): the PATH folders and where they really are, and for every Python
interpreter on PATH its import path, site folders, standard library and the modules it and
its test runner (pytest, with every plugin it loads) import at start-up. Asked of the
interpreters, not guessed from folder names: a distribution's patches (Debian's
dist-packages, pyenv, a venv) give the answer they give. sandlot.integrity judges the
agent's changes against it.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from sandlot.sandbox.base import DEFAULT_PATH, KnowsItsPristineState, Sandbox

#: Run by `sh` in the pristine sandbox: tab-separated lines, one JSON object per Python.
PROBE_SH = r"""
IFS=:
for d in $PATH; do
  [ -n "$d" ] && printf 'pathdir\t%s\t%s\n' "$d" "$(readlink -f -- "$d" 2>/dev/null)"
done
seen=:
# Each interpreter gets 20 s: a plugin that hangs must not cost the whole probe.
limited() { if command -v timeout >/dev/null 2>&1; then timeout 20 "$@"; else "$@"; fi; }
for d in $PATH; do
  for exe in "$d"/python "$d"/python3 "$d"/python3.[0-9] "$d"/python3.[0-9][0-9]; do
    [ -f "$exe" ] && [ -x "$exe" ] || continue
    real=$(readlink -f -- "$exe") || continue
    case "$seen" in *":$real:"*) continue ;; esac
    seen="$seen$real:"
    PYTHONDONTWRITEBYTECODE=1 limited "$exe" -B -c "$SANDLOT_PY_PROBE" "$real" \
      </dev/null 2>/dev/null
  done
done
exit 0
"""

#: Run by each interpreter: what it loads at start-up, and with its test runner.
PY_PROBE = r"""
import json, os, sys
out = {"exe": sys.argv[1]}
real = lambda p: os.path.realpath(p)
out["sys_path"] = [real(p) for p in sys.path if p]  # "" is the cwd (/)
try:
    import site
    sites = list(getattr(site, "getsitepackages", lambda: [])())
    if getattr(site, "ENABLE_USER_SITE", False):
        sites.append(site.getusersitepackages())
except Exception:
    sites = []
out["site_dirs"] = [real(p) for p in sites]
try:
    import sysconfig
    out["stdlib_dirs"] = sorted({real(sysconfig.get_path(k)) for k in ("stdlib", "platstdlib")})
except Exception:
    out["stdlib_dirs"] = []
try:
    import importlib.util
    if importlib.util.find_spec("pytest") is not None:
        saved = os.dup(1), os.dup(2)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1); os.dup2(null, 2)
        try:
            import pytest
            pytest.main(["-q", "--collect-only", "-p", "no:cacheprovider",
                         "/nonexistent-sandlot-probe"])
        except BaseException:
            pass
        finally:
            os.dup2(saved[0], 1); os.dup2(saved[1], 2)
except Exception:
    pass
out["loaded"] = sorted({name.split(".")[0] for name in list(sys.modules)})
print("python\t" + json.dumps(out))
"""

#: Packages a verifier installs for itself at test time (`pip install pytest` in test.sh):
#: not in the pristine image to be measured, so named. A copy the agent planted would be
#: taken as already installed, and run.
RUNNER_PACKAGES = frozenset({"pytest", "_pytest", "pluggy", "py", "iniconfig", "unittest",
                             "coverage", "pip", "setuptools", "_distutils_hack", "packaging"})
PROBE_TIMEOUT_SEC = 60.0


@dataclass(frozen=True)
class PythonMachinery:
    """One interpreter on PATH, as it starts in the pristine sandbox (real paths)."""

    exe: str
    sys_path: tuple[str, ...]
    site_dirs: tuple[str, ...]
    stdlib_dirs: tuple[str, ...]
    #: Top-level modules loaded at start-up and by its test runner: the machinery.
    loaded: frozenset[str]


@dataclass(frozen=True)
class Machinery:
    """The pristine sandbox's answer; `measured` False means the static defaults only."""

    #: PATH folders in order, each (as written, where it really is); the latter deduped.
    path_dirs: tuple[tuple[str, str], ...] = ()
    pythons: tuple[PythonMachinery, ...] = ()
    measured: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def path_folders(self) -> tuple[tuple[str, str], ...]:
        """The PATH folders measured, else DEFAULT_PATH's taken as written."""
        return self.path_dirs or tuple((d, d) for d in DEFAULT_PATH.split(":"))

    @property
    def resolved_path_dirs(self) -> list[str]:
        """Where the PATH folders really are, in PATH order, each once."""
        out: list[str] = []
        for _, real in self.path_folders:
            if real not in out:
                out.append(real)
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"path_dirs": [list(p) for p in self.path_dirs],
                "pythons": [{"exe": p.exe, "sys_path": list(p.sys_path),
                             "site_dirs": list(p.site_dirs),
                             "stdlib_dirs": list(p.stdlib_dirs),
                             "loaded": sorted(p.loaded)} for p in self.pythons]}


def parse_probe(text: str) -> Machinery:
    """The probe's output; lines it cannot read are skipped (a noisy interpreter)."""
    path_dirs: list[tuple[str, str]] = []
    pythons: list[PythonMachinery] = []
    for line in text.splitlines():
        kind, _, rest = line.partition("\t")
        if kind == "pathdir":
            written, _, real = rest.partition("\t")
            if written.startswith("/"):
                path_dirs.append((written, real if real.startswith("/") else written))
        elif kind == "python":
            try:
                data = json.loads(rest)
                pythons.append(PythonMachinery(
                    exe=str(data["exe"]), sys_path=_paths(data.get("sys_path")),
                    site_dirs=_paths(data.get("site_dirs")),
                    stdlib_dirs=_paths(data.get("stdlib_dirs")),
                    loaded=frozenset(str(n) for n in data.get("loaded") or [])))
            except (ValueError, KeyError, TypeError):
                continue
    return Machinery(path_dirs=tuple(path_dirs), pythons=tuple(pythons), measured=True)


def _paths(value: Any) -> tuple[str, ...]:
    return tuple(str(p) for p in value or [] if isinstance(p, str) and p.startswith("/"))


async def probe_machinery(sandbox: Sandbox, env: dict[str, str], user: str | None,
                          ) -> Machinery:
    """Ask the pristine `sandbox`, as the verifier will run in it. From `/`, so a
    conftest.py of the workdir is not what pytest loads. A probe that fails (no shell, a
    timeout) gives the static defaults, with a note saying why."""
    try:
        result = await sandbox.exec(
            ["sh", "-c", PROBE_SH], timeout_sec=PROBE_TIMEOUT_SEC, cwd="/",
            env={**env, "SANDLOT_PY_PROBE": PY_PROBE}, network="none", user=user)
    except Exception as exc:  # any failure means "not measured"
        return Machinery(notes=[f"the machinery probe could not run: {exc}"])
    if result.timed_out or result.exit_code != 0:
        return Machinery(notes=[f"the machinery probe failed (exit {result.exit_code}"
                                f"{', timed out' if result.timed_out else ''})"])
    return parse_probe(result.stdout)


class MachineryCache:
    """One probe per kind of pristine sandbox in a job.

    The probe starts every Python on PATH with its test runner: the largest part of a
    trivial trial's cost. Its answer depends only on the sandbox's files at start (its
    `pristine_key`, see sandbox.base.KnowsItsPristineState) and on how the verifier runs
    (its environment and user), so trials of alike sandboxes share one probe. A failed
    probe is not kept: the next trial asks again. Held by the job, never across jobs (a
    sandbox on the host's root sees the host as it is now).
    """

    def __init__(self) -> None:
        self._probes: dict[str, asyncio.Future[Machinery]] = {}

    async def probe(self, sandbox: Sandbox, env: dict[str, str], user: str | None,
                    ran_before: str) -> tuple[Machinery, bool]:
        """The machinery of `sandbox`, and whether it was probed in an earlier sandbox.
        `ran_before` says what the trial did in the sandbox before the probe (the users it
        made, whose homes are on the import path; its healthcheck command)."""
        base = sandbox.pristine_key if isinstance(sandbox, KnowsItsPristineState) else None
        if base is None:
            return await probe_machinery(sandbox, env, user), False
        key = json.dumps([base, sorted(env.items()), user, ran_before])
        shared = self._probes.get(key)
        if shared is not None:
            known = await asyncio.shield(shared)
            if known.measured:
                return known, True
        future: asyncio.Future[Machinery] = asyncio.get_running_loop().create_future()
        self._probes[key] = future
        try:
            found = await probe_machinery(sandbox, env, user)
        except BaseException:
            del self._probes[key]
            future.set_result(Machinery())  # unmeasured: a trial waiting probes for itself
            raise
        future.set_result(found)
        if not found.measured:
            del self._probes[key]
        return found, False
