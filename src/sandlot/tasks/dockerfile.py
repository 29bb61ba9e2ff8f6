"""Read an environment/Dockerfile into the steps the local sandbox can reproduce faithfully.

The local backend has no image to pull: it reuses the host's root and replays what the
Dockerfile adds on top (files, env, workdir, RUN steps). Anything it cannot honour is refused
with a message naming the line, so a task never runs in a silently different environment.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

IGNORED = {"LABEL", "EXPOSE", "CMD", "ENTRYPOINT", "STOPSIGNAL", "HEALTHCHECK", "VOLUME",
           "MAINTAINER"}
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
#: What a Debian base image's environment holds before the Dockerfile adds to it, so
#: `ENV PATH=/opt/venv/bin:$PATH` extends the usual PATH instead of emptying it.
IMAGE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
             "HOME": "/root"}
USE_CONTAINER = "use a container backend (--sandbox docker/podman) for this task"


@dataclass(frozen=True)
class DockerfileIssue:
    line: int
    message: str


@dataclass(frozen=True)
class CopyStep:
    sources: list[str]
    dest: str
    workdir: str
    extract: bool = False
    chown: str | None = None
    chmod: str | None = None


@dataclass(frozen=True)
class RunStep:
    argv: list[str]
    env: dict[str, str]
    workdir: str
    line: int


Step = CopyStep | RunStep


@dataclass
class DockerfilePlan:
    base_image: str | None = None
    steps: list[Step] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    issues: list[DockerfileIssue] = field(default_factory=list)


_VAR = re.compile(r"\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?P<op>:?[-+])?(?P<word>[^}]*)\}"
                  r"|(?P<plain>[A-Za-z_][A-Za-z0-9_]*))")


def expand(text: str, env: dict[str, str]) -> str:
    """Docker's variable substitution: $X, ${X}, ${X:-default}, ${X:+alt}."""

    def repl(m: re.Match[str]) -> str:
        name = m.group("braced") or m.group("plain")
        value = env.get(name)
        op = m.group("op")
        if op in (":-", "-"):
            return value if value else m.group("word")
        if op in (":+", "+"):
            return m.group("word") if value else ""
        return value or ""

    return _VAR.sub(repl, text)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Join backslash continuations; drop comments and blank lines; keep start line numbers."""
    out: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 0
    for no, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue
        if not buf:
            start = no
        if stripped.endswith("\\"):
            buf.append(stripped[:-1])
            continue
        buf.append(stripped)
        out.append((start, " ".join(b.strip() for b in buf).strip()))
        buf = []
    if buf:
        out.append((start, " ".join(buf).strip()))
    return out


def _split_flags(args: str) -> tuple[dict[str, str], str]:
    flags: dict[str, str] = {}
    rest = args
    while rest.startswith("--"):
        head, _, rest = rest.partition(" ")
        key, _, value = head[2:].partition("=")
        flags[key] = value
        rest = rest.lstrip()
    return flags, rest


def _parse_kv(args: str, env: dict[str, str]) -> dict[str, str]:
    """ENV/ARG pairs: `K=V K2="V 2"` or the legacy `K V with spaces`."""
    if "=" not in args.split(" ", 1)[0]:
        key, _, value = args.partition(" ")
        return {key: expand(value.strip(), env)}
    pairs: dict[str, str] = {}
    for token in shlex.split(args, posix=True):
        key, _, value = token.partition("=")
        pairs[key] = expand(value, {**env, **pairs})
    return pairs


def _resolve(path: str, workdir: str) -> str:
    if path.startswith("/"):
        return str(Path(path))
    return str(Path(workdir) / path)


def parse_dockerfile(text: str) -> DockerfilePlan:
    plan = DockerfilePlan()
    env: dict[str, str] = {}
    args: dict[str, str] = {}
    workdir = "/"
    saw_workdir = False
    n_from = 0
    for line, content in _logical_lines(text):
        instr, _, rest = content.partition(" ")
        instr = instr.upper()
        rest = rest.strip()
        scope = {**IMAGE_ENV, **args, **env}

        def refuse(msg: str, line: int = line) -> None:
            plan.issues.append(DockerfileIssue(line, f"{msg}; {USE_CONTAINER}"))

        heredoc = re.search(r"<<-?\s*['\"]?\w+", rest)
        if "<<" in rest and instr in {"RUN", "COPY", "ADD"} and heredoc:
            refuse(f"{instr} with a heredoc is not supported by the local sandbox")
            continue
        if instr == "FROM":
            n_from += 1
            if n_from > 1:
                refuse("multi-stage builds (a second FROM) are not supported")
                continue
            plan.base_image = expand(rest.split()[0], args) if rest else None
        elif instr == "ARG":
            name, _, default = rest.partition("=")
            args[name.strip()] = expand(default.strip().strip('"'), scope) if default else args.get(
                name.strip(), "")
        elif instr == "ENV":
            env.update(_parse_kv(rest, scope))
        elif instr == "WORKDIR":
            workdir = _resolve(expand(rest.strip('"'), scope), workdir)
            saw_workdir = True
        elif instr in {"COPY", "ADD"}:
            flags, rest2 = _split_flags(rest)
            if "from" in flags:
                refuse(f"{instr} --from needs another image")
                continue
            unknown = set(flags) - {"chown", "chmod", "link"}
            if unknown:
                refuse(f"{instr} flag --{sorted(unknown)[0]} is not supported")
                continue
            parts = json.loads(rest2) if rest2.startswith("[") else shlex.split(rest2)
            parts = [expand(p, scope) for p in parts]
            if len(parts) < 2:
                plan.issues.append(
                    DockerfileIssue(line, f"{instr} needs a source and a destination"))
                continue
            sources, dest = parts[:-1], parts[-1]
            if instr == "ADD" and any(re.match(r"^[a-z]+://", s) for s in sources):
                refuse("ADD from a URL is not supported (download it in a RUN step instead)")
                continue
            extract = instr == "ADD" and all(s.endswith(ARCHIVE_SUFFIXES) for s in sources)
            dest_abs = _resolve(dest, workdir) + ("/" if dest.endswith("/") else "")
            plan.steps.append(CopyStep(sources, dest_abs, workdir, extract,
                                       flags.get("chown") or None, flags.get("chmod") or None))
        elif instr == "RUN":
            flags, rest2 = _split_flags(rest)
            if flags:
                refuse(f"RUN --{next(iter(flags))} is not supported")
                continue
            if rest2.startswith("["):
                try:
                    argv = [str(a) for a in json.loads(rest2)]
                except json.JSONDecodeError:
                    argv = ["/bin/sh", "-c", rest2]
            else:
                argv = ["/bin/sh", "-c", rest2]
            plan.steps.append(RunStep(argv, {**args, **env}, workdir, line))
        elif instr == "USER":
            user = expand(rest, scope).split(":")[0]
            if user not in {"root", "0"}:
                refuse(f"USER {user} (a non-root user) is not supported")
        elif instr == "SHELL":
            refuse("SHELL is not supported")
        elif instr == "ONBUILD":
            refuse("ONBUILD is not supported")
        elif instr in IGNORED:
            continue
        else:
            plan.issues.append(DockerfileIssue(line, f"unknown instruction {instr!r}"))
    if n_from == 0:
        plan.issues.append(DockerfileIssue(1, "no FROM instruction"))
    plan.env = env
    plan.workdir = workdir if saw_workdir else None
    return plan
