"""Read an environment/Dockerfile into the steps the local sandbox can reproduce faithfully.

The local backend has no image to pull: it reuses the host's root and replays what the
Dockerfile adds on top (files, env, workdir, RUN steps). Anything it cannot honour is refused
with a message naming the line, so a task never runs in a silently different environment.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from dataclasses import dataclass, field
from typing import Literal

from sandlot.images.config import ImageConfig, non_root
from sandlot.tasks.config import USER_SPEC

#: CMD too: Harbor replaces it (`sh -c "sleep infinity"`), so it never runs.
IGNORED = {"LABEL", "EXPOSE", "CMD", "STOPSIGNAL", "HEALTHCHECK", "VOLUME", "MAINTAINER"}
ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
#: What a Debian base image's environment holds before the Dockerfile adds to it, so
#: `ENV PATH=/opt/venv/bin:$PATH` extends the usual PATH instead of emptying it.
IMAGE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
             "HOME": "/root"}
USE_CONTAINER = "use a container backend (--sandbox docker, which also drives Podman) for this task"


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
    #: The Dockerfile line the COPY/ADD starts on (keyword-only: it follows defaulted fields).
    line: int = field(kw_only=True)
    #: Files written from heredocs (`COPY <<EOF /etc/x`): (name, content), in order.
    inline: tuple[tuple[str, str], ...] = field(default=(), kw_only=True)


@dataclass(frozen=True)
class RunStep:
    argv: list[str]
    env: dict[str, str]
    workdir: str
    line: int
    #: The USER in effect (None: root), as `user[:group]`.
    user: str | None = None
    #: `RUN --network=none` runs without one; every other step goes outbound.
    network: Literal["none", "outbound"] = "outbound"
    #: What the command reads on stdin (a heredoc script run by its #! interpreter).
    stdin: str | None = None


Step = CopyStep | RunStep


@dataclass
class DockerfilePlan:
    base_image: str | None = None
    steps: list[Step] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    #: The USER in effect at the end (None: root), the base image's when parsed with its
    #: config and no USER follows: the image's default user for every phase.
    user: str | None = None
    #: The last ENTRYPOINT (None: none, or `ENTRYPOINT []`). The exec form gets the idle
    #: command as its arguments, as Harbor's `sh -c "sleep infinity"` CMD; the shell form
    #: (`/bin/sh -c <text>`, entrypoint_takes_args False) takes none, as in Docker.
    entrypoint: list[str] | None = None
    entrypoint_takes_args: bool = True
    #: `ENTRYPOINT []` came last: the base image's ENTRYPOINT does not run either.
    resets_entrypoint: bool = False
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


#: A heredoc opener: `<<EOF`, `<<-EOF`, `<<"EOF"`, `<<'EOF'`; never a here-string `<<<`
#: nor a shift `$((1 << 2))` (the terminator starts with a letter).
_HEREDOC = re.compile(r"(?<!<)<<(?!<)(?P<dash>-?)\s*(?P<q>['\"]?)(?P<word>[A-Za-z_][\w.-]*)(?P=q)")
_HEREDOC_INSTRUCTIONS = {"RUN", "COPY", "ADD"}


def _heredocs(content: str) -> list[tuple[bool, str]]:
    """(strip leading tabs?, terminator) for each heredoc a RUN/COPY/ADD line opens."""
    if content.partition(" ")[0].upper() not in _HEREDOC_INSTRUCTIONS:
        return []
    return [(m.group("dash") == "-", m.group("word")) for m in _HEREDOC.finditer(content)]


def _physical_lines(text: str) -> list[str]:
    """Lines as Docker splits them: at \n (a trailing \r dropped), not at \x85 or \u2028."""
    return [raw.removesuffix("\r") for raw in text.split("\n")]


@dataclass(frozen=True)
class LogicalLine:
    """One instruction: its first line number, its text (continuations joined) and the
    bodies of the heredocs it opens, in order, as written (each without its terminator)."""

    line: int
    content: str
    heredocs: tuple[str, ...] = ()


def _logical_lines(text: str) -> list[LogicalLine]:
    """Join backslash continuations; drop comments and blank lines; keep start line
    numbers. A heredoc body is not instructions: it runs to its terminator line, and is
    kept with the instruction that opened it."""
    out: list[LogicalLine] = []
    buf: list[str] = []
    start = 0
    pending: list[tuple[bool, str]] = []  # heredocs whose bodies come next
    body: list[str] = []
    bodies: list[str] = []
    for no, raw in enumerate(_physical_lines(text), start=1):
        if pending:
            dash, word = pending[0]
            if (raw.lstrip("\t") if dash else raw) == word:
                pending.pop(0)
                bodies.append("\n".join(body))
                body = []
                if not pending:
                    last = out[-1]
                    out[-1] = LogicalLine(last.line, last.content, tuple(bodies))
            else:
                body.append(raw)
            continue
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
        content = " ".join(b.strip() for b in buf).strip()
        out.append(LogicalLine(start, content))
        pending, bodies = _heredocs(content), []
        buf = []
    if buf:
        out.append(LogicalLine(start, " ".join(buf).strip()))
    elif pending and out:  # a heredoc never closed: what there is, as Docker reads it
        out[-1] = LogicalLine(out[-1].line, out[-1].content, (*bodies, "\n".join(body)))
    return out


#: RUN --mount types whose absence changes nothing but speed (a package cache).
_HARMLESS_MOUNTS = {"cache"}


def _run_flags(flags: dict[str, str]) -> tuple[Literal["none", "outbound"], str | None]:
    """RUN's flags: (the network the step gets, why the step is refused, if it is)."""
    network: Literal["none", "outbound"] = "outbound"
    for name, value in flags.items():
        if name == "mount":
            options = dict(part.partition("=")[::2] for part in value.split(","))
            kind = options.get("type", "bind")
            if kind not in _HARMLESS_MOUNTS:
                return network, f"RUN --mount=type={kind} is not supported"
        elif name == "network":
            if value not in ("default", "none", "host"):
                return network, f"RUN --network={value} is not supported"
            network = "none" if value == "none" else "outbound"
        else:
            return network, f"RUN --{name} is not supported"
    return network, None


def _run_command(rest: str, heredocs: tuple[str, ...],
                 shell: list[str]) -> tuple[list[str], str | None]:
    """RUN's argv and stdin: the exec form, the shell form, or (BuildKit's) heredocs. A
    RUN that is only a heredoc runs its body: with the shell, or with the interpreter its
    `#!` line names (reading the body from stdin); heredocs after a command are handed to
    the shell with their bodies, as written."""
    if not heredocs:
        argv = _exec_form(rest) if rest.startswith("[") else None
        return (argv if argv is not None else [*shell, rest]), None
    opener = _HEREDOC.match(rest.strip())
    if opener is not None and opener.end() == len(rest.strip()) and len(heredocs) == 1:
        body = heredocs[0]
        if opener.group("dash"):
            body = "\n".join(line.lstrip("\t") for line in body.split("\n"))
        if body.startswith("#!"):
            interpreter = body.split("\n", 1)[0][2:].split()
            if not interpreter:
                raise _Malformed("the heredoc's #! line names no interpreter")
            return [*interpreter, "/dev/stdin"], body + "\n"
        return [*shell, body], None
    words = iter(_heredocs("RUN " + rest))
    script = rest
    for body, (_, word) in zip(heredocs, words, strict=False):
        script += f"\n{body}\n{word}"
    return [*shell, script], None


#: A COPY/ADD source that is a heredoc: `<<EOF`, `<<-EOF`, `<<"EOF"`.
_INLINE = re.compile(r"""^<<(?P<dash>-?)(?P<q>['"]?)(?P<word>[A-Za-z_][\w.-]*)(?P=q)$""")


def _inline_files(args: str, bodies: tuple[str, ...],
                  scope: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """The heredoc sources of a COPY/ADD (its arguments as written) as (name, content):
    BuildKit's `COPY <<EOF dest`. An unquoted terminator's body has its variables
    expanded; a quoted one's is kept as is."""
    files: list[tuple[str, str]] = []
    for m, body in zip(_HEREDOC.finditer(args), bodies, strict=False):
        if m.group("dash"):
            body = "\n".join(line.lstrip("\t") for line in body.split("\n"))
        files.append((m.group("word"), (expand(body, scope) if not m.group("q") else body)
                      + "\n"))
    return tuple(files)


def _split_flags(args: str) -> tuple[dict[str, str], str]:
    flags: dict[str, str] = {}
    rest = args
    while rest.startswith("--"):
        head, _, rest = rest.partition(" ")
        key, _, value = head[2:].partition("=")
        flags[key] = value
        rest = rest.lstrip()
    return flags, rest


class _Malformed(ValueError):
    """An instruction's arguments cannot be read; the message says why."""


def _shell_words(args: str) -> list[str]:
    try:
        return shlex.split(args, posix=True)
    except ValueError as exc:  # "No closing quotation", "No escaped character"
        raise _Malformed(f"cannot split the arguments ({str(exc).lower()})") from exc


def _parse_kv(args: str, env: dict[str, str]) -> dict[str, str]:
    """ENV/ARG pairs: `K=V K2="V 2"` or the legacy `K V with spaces`."""
    if "=" not in args.split(" ", 1)[0]:
        key, _, value = args.partition(" ")
        return {key: expand(value.strip(), env)}
    pairs: dict[str, str] = {}
    for token in _shell_words(args):
        key, _, value = token.partition("=")
        pairs[key] = expand(value, {**env, **pairs})
    return pairs


def _copy_args(args: str) -> list[str]:
    """COPY/ADD sources and destination: the JSON form `["a", "b"]` or shell words."""
    if not args.startswith("["):
        return _shell_words(args)
    try:
        parts = json.loads(args)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise _Malformed("the JSON form is not valid JSON "
                         '(write it as ["source", "destination"])') from exc
    if not isinstance(parts, list) or not all(isinstance(p, str) for p in parts):
        raise _Malformed('the JSON form must be an array of strings, e.g. ["source", "dest"]')
    return parts


def _resolve(path: str, workdir: str) -> str:
    """An absolute, normalized path: `..` and `.` folded, as Docker does."""
    joined = posixpath.normpath(posixpath.join(workdir, path))
    return "/" + joined.lstrip("/")


def _exec_form(args: str) -> list[str] | None:
    """RUN's JSON form, or None when it is not an array of strings (then it is shell form)."""
    try:
        parts = json.loads(args)
    except (json.JSONDecodeError, RecursionError):
        return None
    if isinstance(parts, list) and parts and all(isinstance(p, str) for p in parts):
        return parts
    return None


def parse_dockerfile(text: str, build_args: dict[str, str] | None = None,
                     base: ImageConfig | None = None) -> DockerfilePlan:
    """The steps and settings of a Dockerfile; `build_args` (`--build-arg`) override the
    defaults of the ARGs it declares, as in `docker build`. `base` is the config of the
    image it starts FROM, once pulled: its steps start in that image's WORKDIR, as its
    USER, and `$VAR`s expand against its ENV, as in Docker (without it, a Debian image's
    usual PATH and HOME stand in)."""
    given = build_args or {}
    plan = DockerfilePlan()
    image_env = {**IMAGE_ENV, **base.env} if base is not None else IMAGE_ENV
    env: dict[str, str] = {}
    #: ARGs declared before the first FROM: usable in FROM only, unless redeclared after it
    #: (`ARG NAME` without a value then takes the pre-FROM default), as in Docker.
    meta_args: dict[str, str] = {}
    args: dict[str, str] = {}
    workdir = base.workdir if base is not None and base.workdir else "/"
    saw_workdir = False
    user = non_root(base.user) if base is not None else None
    n_from = 0
    shell = ["/bin/sh", "-c"]
    for logical in _logical_lines(text):
        line, content = logical.line, logical.content
        instr, _, rest = content.partition(" ")
        instr = instr.upper()
        rest = rest.strip()
        scope = {**image_env, **args, **env}

        def refuse(msg: str, line: int = line) -> None:
            plan.issues.append(DockerfileIssue(line, f"{msg}; {USE_CONTAINER}"))

        if _heredocs(content) and instr not in _HEREDOC_INSTRUCTIONS:
            refuse(f"{instr} with a heredoc is not supported by the local sandbox")
            continue
        if instr == "FROM":
            n_from += 1
            if n_from > 1:
                refuse("multi-stage builds (a second FROM) are not supported")
                continue
            plan.base_image = expand(rest.split()[0], meta_args) if rest else None
        elif instr == "ARG":
            name, eq, default = rest.partition("=")
            name = name.strip()
            if n_from == 0:
                meta_args[name] = given.get(name, expand(default.strip().strip('"'),
                                                         meta_args) if eq else "")
            elif eq:
                args[name] = given.get(name, expand(default.strip().strip('"'), scope))
            else:
                args[name] = given.get(name, args.get(name, meta_args.get(name, "")))
        elif instr == "ENV":
            try:
                env.update(_parse_kv(rest, scope))
            except _Malformed as exc:
                plan.issues.append(DockerfileIssue(line, f"malformed ENV: {exc}"))
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
            try:
                words = _copy_args(rest2)
            except _Malformed as exc:
                plan.issues.append(DockerfileIssue(line, f"malformed {instr}: {exc}"))
                continue
            if len(words) < 2:
                plan.issues.append(
                    DockerfileIssue(line, f"{instr} needs a source and a destination"))
                continue
            inline = _inline_files(rest2, logical.heredocs, scope)
            sources = [expand(w, scope) for w in words[:-1] if not _INLINE.match(w)]
            dest = expand(words[-1], scope)
            if instr == "ADD" and any(re.match(r"^[a-z]+://", s) for s in sources):
                refuse("ADD from a URL is not supported (download it in a RUN step instead)")
                continue
            extract = instr == "ADD" and all(s.endswith(ARCHIVE_SUFFIXES) for s in sources)
            dest_abs = _resolve(dest, workdir)
            if dest.endswith("/") and not dest_abs.endswith("/"):
                dest_abs += "/"
            plan.steps.append(CopyStep(sources, dest_abs, workdir, extract,
                                       flags.get("chown") or None, flags.get("chmod") or None,
                                       line=line, inline=inline))
        elif instr == "RUN":
            flags, rest2 = _split_flags(rest)
            network, refused = _run_flags(flags)
            if refused:
                refuse(refused)
                continue
            try:
                argv, stdin = _run_command(rest2, logical.heredocs, shell)
            except _Malformed as exc:
                plan.issues.append(DockerfileIssue(line, f"malformed RUN: {exc}"))
                continue
            plan.steps.append(RunStep(argv, {**args, **env}, workdir, line, user,
                                      network=network, stdin=stdin))
        elif instr == "SHELL":
            argv = _exec_form(rest)
            if argv is None:
                plan.issues.append(DockerfileIssue(line, 'SHELL takes the JSON form, e.g. '
                                                   'SHELL ["/bin/bash", "-c"]'))
                continue
            shell = argv
        elif instr == "USER":
            named = expand(rest, scope).strip()
            if not USER_SPEC.fullmatch(named):
                plan.issues.append(DockerfileIssue(line, f"USER {named!r} is not a user name "
                                                   "or uid (optionally :group)"))
                continue
            user = non_root(named)
        elif instr == "ENTRYPOINT":
            argv = _exec_form(rest) if rest.startswith("[") else None
            if rest.replace(" ", "") == "[]":
                plan.entrypoint, plan.entrypoint_takes_args = None, True
                plan.resets_entrypoint = True
            elif argv is not None:
                plan.entrypoint, plan.entrypoint_takes_args = argv, True
            elif rest:
                plan.entrypoint, plan.entrypoint_takes_args = [*shell, rest], False
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
    plan.user = user
    return plan

