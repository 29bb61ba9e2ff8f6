"""Check a task's test.sh for what it reads that the agent can write: shell start-up
files, the agent's directory as Python's first import folder, project files that define
the test command, scripts and rewards taken from the workdir.

Shared-mode verification puts back the verifier's own machinery (sandlot.integrity), but
what test.sh *asks* for is the work under test, so a test that asks for the agent's files
where it means the image's can be fooled. These are warnings for the task's author, found
by reading test.sh line by line (no shell is run): a heuristic, said as one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Untrusted:
    """One line of test.sh that reads what the agent can write."""

    line: int
    what: str
    message: str
    fix: str


#: Where a command word starts: the line's start, a separator, a quote (`bash -c 'x'`).
_AT = r"""(?:^|[\s;&|(`"'])"""
#: The same, or after a folder (`/usr/bin/python3`).
_AT_PATH = r"""(?:^|[\s;&|(`"'/])"""
_LOGIN_SHELL = re.compile(
    _AT + r"(?:bash|sh|zsh|dash)\s+(?:-[A-Za-z]*[li][A-Za-z]*|--login)\b"
    r"|" + _AT + r"su\s+(?:-|-l|--login)(?:\s|$)|" + _AT + r"sudo\s+(?:-\w*\s+)*-i\b")
_PYTHON_M = re.compile(_AT_PATH + r"python[0-9.]*\s+((?:-[A-Za-z]+\s+)*)-m\s+(\S+)")
_PYTEST = re.compile(_AT_PATH + r"(?:py\.test|pytest)(?:\s|$)|-m\s+pytest\b")
_GIT = re.compile(_AT + r"git\s")
#: git commands that read no repository's configuration.
_GIT_SAFE = re.compile(r"\bgit\s+(?:clone|init|--version|config\s+--(?:global|system))\b")
#: Test commands a project's own files define (building the agent's project is not one:
#: its code is what is tested).
_RUNNER = re.compile(_AT + r"(npm\s+(?:test|t|run\s+test\S*|run-script\s+test\S*)\b"
                     r"|(?:yarn|pnpm)\s+(?:run\s+)?test\b|make\s+(?:\S+\s+)*(?:test|check)\b"
                     r"|tox(?:\s|$)|nox(?:\s|$)|uv\s+run\b|poetry\s+run\b)")
#: A package install (`pip install pytest` names pytest without running it).
_ANY_INSTALL = re.compile(r"\b(?:install|add)\b")
_INSTALL = re.compile(_AT + r"(?:pip3?|uv\s+pip|python[0-9.]*\s+-m\s+pip)\s+"
                      r"install\b[^\n]*?(?:\s-r\s*(\S+)|\s-e\s+(\S+)|\s(\.)(?:\s|$))"
                      r"|" + _AT + r"(?:uv\s+sync|npm\s+(?:install|ci|i)|yarn\s+install"
                      r"|poetry\s+install)\b")
_CD = re.compile(r"(?:^|[;&|(]\s*|\s)cd\s+(\S+)")
_SOURCE = re.compile(r"(?:^|[;&|(]\s*)(?:source|\.)\s+(\S+)")
_RUN_SCRIPT = re.compile(r"(?:^|[;&|(]\s*)(?:bash|sh)\s+(\S+\.sh)\b"
                         r"|(?:^|[;&|(]\s*)(\./\S+\.sh)\b")
_COMMANDS = re.compile(r"&&|\|\||;")
_REWARD = re.compile(r"/logs/verifier/reward\.(?:txt|json)")


def _in_workdir(path: str, workdir: str, cwd_is_workdir: bool) -> bool:
    path = path.strip("\"'")
    if path.startswith("$") or path.startswith("~"):
        return False
    if path.startswith("/"):
        return path == workdir or path.startswith(workdir.rstrip("/") + "/")
    return cwd_is_workdir


def untrusted_reads(test_sh: str, workdir: str) -> list[Untrusted]:
    """What test.sh reads that the agent can write. test.sh starts in the task's
    working directory (as Harbor runs it); `cd` is followed line by line."""
    out: list[Untrusted] = []
    cwd_is_workdir = True
    for no, raw in enumerate(test_sh.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        # Each command of the line in turn: `cd /tests && python -m pytest` is fine.
        for command in _COMMANDS.split(line):
            command = command.strip()
            for finding in _line_findings(no, command, workdir, cwd_is_workdir):
                if finding not in out:
                    out.append(finding)
            for target in _CD.findall(command):
                cwd_is_workdir = _after_cd(target.strip("\"';)"), workdir, cwd_is_workdir)
    return out


def _after_cd(target: str, workdir: str, was: bool) -> bool:
    """Whether the directory after `cd target` is the agent's: a path inside the workdir,
    or a relative step down from it; a variable or `~` counts as elsewhere (unknown, and
    a warning must not guess)."""
    if target == "-":
        return was
    if target.startswith("/"):
        return target == workdir or target.startswith(workdir.rstrip("/") + "/")
    if target.startswith(("$", "~")) or target.startswith(".."):
        return False
    return was


def _line_findings(no: int, line: str, workdir: str, here: bool) -> list[Untrusted]:
    found: list[Untrusted] = []
    if _LOGIN_SHELL.search(line):
        found.append(Untrusted(
            no, "login shell", "starts a login or interactive shell, which reads start-up "
            "files the agent can write (/etc/profile, /etc/profile.d/*, ~/.bash_profile, "
            "~/.bashrc); sandlot keeps them, since the test asked for them",
            "run the command without -l/-i (bash -c ...), and set in test.sh the PATH or "
            "variables it needs"))
    for flags, module in _PYTHON_M.findall(line):
        if here and not re.search(r"[PI]", flags):
            found.append(Untrusted(
                no, "python -m in the workdir", f"`python -m {module}` from the agent's "
                "working directory puts that directory first on the import path: a module "
                "the agent leaves there named like one the runner imports (argparse.py, "
                "a pytest/ folder) replaces it",
                "add -P (Python 3.11+: the directory is not put on the path) or cd /tests "
                "first; import the agent's code by an explicit path"))
    # Arguments in a variable ($TEST_DIR) are unknown: no guess.
    if _PYTEST.search(line) and "/tests" not in line and "$" not in line and here and \
            not _ANY_INSTALL.search(line):
        found.append(Untrusted(
            no, "pytest on the workdir", "runs pytest on the agent's working directory: "
            "the conftest.py, pytest.ini, pyproject.toml and tests it finds there are "
            "the agent's", "pass the task's own test files (pytest /tests/test_x.py)"))
    if _GIT.search(line) and "hookspath" not in line.lower() and not _GIT_SAFE.search(
            line) and (here or workdir in line):
        found.append(Untrusted(
            no, "git in the workdir", "runs git on the agent's repository, whose "
            ".git/config (core.fsmonitor, filters, aliases) and hooks run commands",
            "git -c core.fsmonitor= -c core.hooksPath=/dev/null ..."))
    runner = _RUNNER.search(line)
    if runner and here:
        found.append(Untrusted(
            no, "project test command", f"`{runner.group(1).strip()}` runs what the "
            "agent's project files define (package.json scripts, a Makefile, tox.ini, "
            "pyproject.toml): the agent can make it pass",
            "run the test tool itself on the task's tests (npx jest /tests/..., "
            "make -f /tests/Makefile, python -m pytest /tests/...)"))
    install = _INSTALL.search(line)
    if install and (here or any(workdir in (g or "") for g in install.groups())):
        found.append(Untrusted(
            no, "install from the workdir", "installs what the agent's files list, during "
            "verification and with the verifier's rights (build scripts and setup.py run "
            "code)", "install the tests' own requirements from /tests, pinned"))
    for target in _SOURCE.findall(line):
        if _in_workdir(target, workdir, here):
            found.append(Untrusted(
                no, "sources a workdir file", f"sources {target}, a file the agent can "
                "rewrite", "keep what test.sh needs in /tests and source it from there"))
    for script, local in _RUN_SCRIPT.findall(line):
        target = script or local
        if target and not target.startswith("/tests") and _in_workdir(target, workdir, here):
            found.append(Untrusted(
                no, "runs a workdir script", f"runs {target}, a script the agent can "
                "rewrite", "keep the test's scripts in /tests"))
    if _REWARD.search(line) and (workdir in line.split(">")[0]) and re.search(
            r"\b(cp|cat|mv|ln|tee)\b", line):
        found.append(Untrusted(
            no, "reward from the workdir", "takes the reward from a file in the agent's "
            "working directory", "compute the reward in test.sh from the tests' own result"))
    return found
