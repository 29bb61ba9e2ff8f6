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
from collections.abc import Mapping
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
    #: `COPY --from=<stage>`: the sources are in that earlier stage (its index in
    #: DockerfilePlan.stages), not in environment/.
    from_stage: int | None = field(default=None, kw_only=True)
    #: `COPY --from=<image>`: the sources are in that image.
    from_image: str | None = field(default=None, kw_only=True)

    @property
    def from_context(self) -> bool:
        """Do the sources come from environment/ (not from a stage or an image)?"""
        return self.from_stage is None and self.from_image is None


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
    """One stage of a Dockerfile: the last one, with the earlier ones in `stages`."""

    base_image: str | None = None
    #: The earlier stage this one starts FROM (its index in the last stage's `stages`),
    #: instead of an image.
    base_stage: int | None = None
    #: `FROM ... AS <name>`.
    name: str | None = None
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
    #: The stages before this one, in order (a multi-stage build; empty for one FROM).
    stages: list[DockerfilePlan] = field(default_factory=list)

    def stage_root_image(self, stage: DockerfilePlan | None = None) -> str | None:
        """The image at the bottom of `stage`'s (default: this stage's) FROM chain."""
        current = self if stage is None else stage
        seen = 0
        while current.base_stage is not None and seen <= len(self.stages):
            current, seen = self.stages[current.base_stage], seen + 1
        return current.base_image

    def needed_stages(self) -> list[int]:
        """The earlier stages this one builds on or copies from, each with what it needs
        in turn, in order: the stages a build of the last stage runs (as BuildKit)."""
        needed: set[int] = set()
        todo = [self]
        while todo:
            stage = todo.pop()
            refs = [stage.base_stage] + [s.from_stage for s in stage.steps
                                         if isinstance(s, CopyStep)]
            for ref in refs:
                if ref is not None and ref not in needed:
                    needed.add(ref)
                    todo.append(self.stages[ref])
        return sorted(needed)

    @property
    def is_multi_stage(self) -> bool:
        """Does building this stage need another stage, or files of another image?"""
        return bool(self.needed_stages()) or any(
            isinstance(s, CopyStep) and s.from_image is not None for s in self.steps)

    @property
    def images(self) -> list[str]:
        """Every image the needed stages start FROM or copy from, in order of first use."""
        out: list[str] = []
        for stage in [*(self.stages[i] for i in self.needed_stages()), self]:
            refs = [stage.base_image] + [s.from_image for s in stage.steps
                                         if isinstance(s, CopyStep)]
            out += [r for r in refs if r is not None and r not in out]
        return out


@dataclass
class _StageState:
    """What holds from one instruction to the next within a stage."""

    plan: DockerfilePlan
    env: dict[str, str] = field(default_factory=dict)
    args: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"
    saw_workdir: bool = False
    user: str | None = None
    shell: list[str] = field(default_factory=lambda: ["/bin/sh", "-c"])
    #: What `$VAR`s see beneath the stage's own ARG and ENV: its image's ENV.
    image_env: dict[str, str] = field(default_factory=lambda: dict(IMAGE_ENV))

    def finish(self) -> DockerfilePlan:
        self.plan.env = self.env
        self.plan.workdir = self.workdir if self.saw_workdir else None
        self.plan.user = self.user
        return self.plan


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
                     bases: Mapping[str, ImageConfig] | None = None) -> DockerfilePlan:
    """The stages, steps and settings of a Dockerfile: its last stage, with the earlier
    ones in `stages`. `build_args` (`--build-arg`) override the defaults of the ARGs it
    declares, as in `docker build`. `bases` maps the images its stages start FROM (as
    written, ARGs expanded) to their configs, once pulled: a stage's steps start in that
    image's WORKDIR, as its USER, and `$VAR`s expand against its ENV, as in Docker
    (without one, a Debian image's usual PATH and HOME stand in)."""
    given = build_args or {}
    known = bases or {}
    issues: list[DockerfileIssue] = []
    #: ARGs declared before the first FROM: usable in FROM only, unless redeclared after it
    #: (`ARG NAME` without a value then takes the pre-FROM default), as in Docker.
    meta_args: dict[str, str] = {}
    finished: list[_StageState] = []
    state = _StageState(DockerfilePlan())
    n_from = 0
    for logical in _logical_lines(text):
        line, content = logical.line, logical.content
        instr, _, rest = content.partition(" ")
        instr = instr.upper()
        rest = rest.strip()
        plan, env, args = state.plan, state.env, state.args
        scope = {**state.image_env, **args, **env}

        def refuse(msg: str, line: int = line) -> None:
            issues.append(DockerfileIssue(line, f"{msg}; {USE_CONTAINER}"))

        if _heredocs(content) and instr not in _HEREDOC_INSTRUCTIONS:
            refuse(f"{instr} with a heredoc is not supported by the local sandbox")
            continue
        if instr == "FROM":
            flags, tail = _split_flags(rest)
            words = tail.split()
            if set(flags) - {"platform"}:
                issues.append(DockerfileIssue(line, f"FROM --{sorted(set(flags) - {'platform'})[0]}"
                                              " is not a FROM flag"))
                continue
            if len(words) not in (1, 3) or (len(words) == 3 and words[1].upper() != "AS"):
                issues.append(DockerfileIssue(line, "malformed FROM: write FROM image "
                                              "[AS name]"))
                continue
            if n_from:
                state.finish()
                finished.append(state)
            n_from += 1
            state = _new_stage(expand(words[0], meta_args),
                               words[2].lower() if len(words) == 3 else None, finished, known)
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
        elif n_from == 0:
            issues.append(DockerfileIssue(line, f"{instr} before the first FROM"))
        elif instr == "ENV":
            try:
                env.update(_parse_kv(rest, scope))
            except _Malformed as exc:
                issues.append(DockerfileIssue(line, f"malformed ENV: {exc}"))
        elif instr == "WORKDIR":
            state.workdir = _resolve(expand(rest.strip('"'), scope), state.workdir)
            state.saw_workdir = True
        elif instr in {"COPY", "ADD"}:
            flags, rest2 = _split_flags(rest)
            unknown = set(flags) - {"chown", "chmod", "link", "from"}
            if unknown:
                refuse(f"{instr} flag --{sorted(unknown)[0]} is not supported")
                continue
            from_stage, from_image = None, None
            if "from" in flags:
                if instr == "ADD":
                    issues.append(DockerfileIssue(line, "ADD has no --from (use COPY --from)"))
                    continue
                from_stage, from_image = _copy_source(expand(flags["from"], scope), finished)
                if from_stage == -1:
                    issues.append(DockerfileIssue(line, f"COPY --from={flags['from']} names "
                                                  "this stage or a later one"))
                    continue
            try:
                words = _copy_args(rest2)
            except _Malformed as exc:
                issues.append(DockerfileIssue(line, f"malformed {instr}: {exc}"))
                continue
            if len(words) < 2:
                issues.append(DockerfileIssue(line, f"{instr} needs a source and a destination"))
                continue
            inline = _inline_files(rest2, logical.heredocs, scope)
            sources = [expand(w, scope) for w in words[:-1] if not _INLINE.match(w)]
            dest = expand(words[-1], scope)
            if instr == "ADD" and any(re.match(r"^[a-z]+://", s) for s in sources):
                refuse("ADD from a URL is not supported (download it in a RUN step instead)")
                continue
            extract = instr == "ADD" and all(s.endswith(ARCHIVE_SUFFIXES) for s in sources)
            dest_abs = _resolve(dest, state.workdir)
            if dest.endswith("/") and not dest_abs.endswith("/"):
                dest_abs += "/"
            plan.steps.append(CopyStep(sources, dest_abs, state.workdir, extract,
                                       flags.get("chown") or None, flags.get("chmod") or None,
                                       line=line, inline=inline, from_stage=from_stage,
                                       from_image=from_image))
        elif instr == "RUN":
            flags, rest2 = _split_flags(rest)
            network, refused = _run_flags(flags)
            if refused:
                refuse(refused)
                continue
            try:
                argv, stdin = _run_command(rest2, logical.heredocs, state.shell)
            except _Malformed as exc:
                issues.append(DockerfileIssue(line, f"malformed RUN: {exc}"))
                continue
            plan.steps.append(RunStep(argv, {**args, **env}, state.workdir, line, state.user,
                                      network=network, stdin=stdin))
        elif instr == "SHELL":
            argv = _exec_form(rest)
            if argv is None:
                issues.append(DockerfileIssue(line, 'SHELL takes the JSON form, e.g. '
                                              'SHELL ["/bin/bash", "-c"]'))
                continue
            state.shell = argv
        elif instr == "USER":
            named = expand(rest, scope).strip()
            if not USER_SPEC.fullmatch(named):
                issues.append(DockerfileIssue(line, f"USER {named!r} is not a user name "
                                              "or uid (optionally :group)"))
                continue
            state.user = non_root(named)
        elif instr == "ENTRYPOINT":
            argv = _exec_form(rest) if rest.startswith("[") else None
            if rest.replace(" ", "") == "[]":
                plan.entrypoint, plan.entrypoint_takes_args = None, True
                plan.resets_entrypoint = True
            elif argv is not None:
                plan.entrypoint, plan.entrypoint_takes_args = argv, True
            elif rest:
                plan.entrypoint, plan.entrypoint_takes_args = [*state.shell, rest], False
        elif instr == "ONBUILD":
            refuse("ONBUILD is not supported")
        elif instr in IGNORED:
            continue
        else:
            issues.append(DockerfileIssue(line, f"unknown instruction {instr!r}"))
    if n_from == 0:  # that one issue says it all
        issues = [i for i in issues if not i.message.endswith("before the first FROM")]
        issues.append(DockerfileIssue(1, "no FROM instruction"))
    last = state.finish()
    last.stages = [done.plan for done in finished]
    last.issues = issues
    return last


def _stage_named(finished: list[_StageState], name: str) -> int | None:
    """The index of the earlier stage called `name` (case-insensitive, as Docker), if any."""
    for index in range(len(finished) - 1, -1, -1):
        if finished[index].plan.name == name.lower():
            return index
    return None


def _new_stage(ref: str, name: str | None, finished: list[_StageState],
               known: Mapping[str, ImageConfig]) -> _StageState:
    """A stage FROM an earlier stage (which it goes on from) or FROM an image (which it
    starts as, when its config is known)."""
    index = _stage_named(finished, ref)
    if index is not None:
        below = finished[index]
        plan = DockerfilePlan(base_stage=index, name=name, entrypoint=below.plan.entrypoint,
                              entrypoint_takes_args=below.plan.entrypoint_takes_args)
        return _StageState(plan, env=dict(below.env), workdir=below.workdir,
                           saw_workdir=below.saw_workdir, user=below.user,
                           shell=list(below.shell), image_env=below.image_env)
    config = known.get(ref)
    plan = DockerfilePlan(base_image=ref, name=name)
    if config is None:
        return _StageState(plan)
    return _StageState(plan, workdir=config.workdir or "/", user=non_root(config.user),
                       image_env={**IMAGE_ENV, **config.env})


def _copy_source(value: str, finished: list[_StageState]) -> tuple[int | None, str | None]:
    """Where `COPY --from=<value>` copies from, as (stage, image): an earlier stage by
    name or number, else an image; stage -1 for a number that is not an earlier stage."""
    index = _stage_named(finished, value)
    if index is not None:
        return index, None
    if value.isdigit():
        return (int(value) if int(value) < len(finished) else -1), None
    return None, value

