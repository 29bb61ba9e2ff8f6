"""The seccomp profile of a docker-backend container: the engine's own default profile,
with sandlot's denials (seccomp.py) added where it lacks them.

A container's profile filters every process in it, `docker exec`s included, so the agent
phase gets the same denials as on the local sandbox. The engine's default is kept, not
replaced: it refuses more than sandlot's list does, and what it refuses it refuses in the
engine's own way.

How the profile is made stricter, whatever the engine's default allows:
- every call sandlot denies outright is taken out of every rule that lets it through,
  and, where the default action would let it through too, denied by a rule of its own;
- `unshare` and `clone` are let through only without a CLONE_NEW* flag (where the
  default let them through at all), as Docker's own default does for a process without
  CAP_SYS_ADMIN;
- `clone3` fails with ENOSYS, so the C library falls back to `clone`.

Docker's built-in default cannot be read through its API, but it already refuses each of
these calls to a container without CAP_SYS_ADMIN, which sandlot never grants: there it is
kept as it is. An engine that runs containers without seccomp, or with a profile sandlot
cannot read, is refused (fail closed).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import tomllib
from pathlib import Path
from typing import Any

from sandlot.errors import SandboxError
from sandlot.sandbox.seccomp import CLONE_NEW_FLAGS, CLONE_NEWTIME, DENIED_CALLS

#: Actions that let a call through (the rest deny, trap or kill).
_PASSING_ACTIONS = frozenset({"SCMP_ACT_ALLOW", "SCMP_ACT_LOG", "SCMP_ACT_TRACE",
                              "SCMP_ACT_NOTIFY"})
#: Docker's names for its built-in default profile in `docker info`.
_DOCKER_BUILTIN = frozenset({"builtin", "default"})
_NAMESPACE_CALLS = ("clone", "unshare")


class EngineSeccompError(SandboxError):
    """The engine's seccomp profile cannot be found, read or made stricter."""


def _passes(action: str | None) -> bool:
    return (action or "") in _PASSING_ACTIONS


def strengthen_profile(profile: dict[str, Any]) -> dict[str, Any]:
    """`profile` (Docker/OCI seccomp JSON) with sandlot's denials added; a new dict."""
    if not isinstance(profile.get("syscalls") or [], list):
        raise EngineSeccompError("the engine's seccomp profile has no list of syscalls")
    taken_out = {*DENIED_CALLS, *_NAMESPACE_CALLS, "clone3"}
    default_passes = _passes(profile.get("defaultAction"))
    let_through: set[str] = set()
    rules: list[dict[str, Any]] = []
    for rule in profile.get("syscalls") or []:
        names = [str(n) for n in rule.get("names") or ([rule["name"]] if "name" in rule else [])]
        if not _passes(rule.get("action")):
            rules.append(rule)
            continue
        let_through.update(n for n in names if n in _NAMESPACE_CALLS)
        kept = [n for n in names if n not in taken_out]
        if kept:
            rules.append({**{k: v for k, v in rule.items() if k != "name"}, "names": kept})
    if not default_passes:  # else the default lets them through, and the denials below hold
        rules.extend(_namespace_rules(sorted(let_through)))
    # A rule whose action is the default one is refused by libseccomp: add only rules
    # that differ from it (a denial the default makes already is not lost).
    default_errno = (profile.get("defaultErrnoRet", errno.EPERM)
                     if profile.get("defaultAction") == "SCMP_ACT_ERRNO" else None)
    if default_errno != errno.EPERM:
        rules.append(_deny(sorted(DENIED_CALLS), errno.EPERM))
        for name in _NAMESPACE_CALLS:
            for flag in _new_flags(name):
                rules.append(_deny([name], errno.EPERM, _masked(flag, flag)))
    if default_errno != errno.ENOSYS:
        rules.append(_deny(["clone3"], errno.ENOSYS))
    return {**profile, "syscalls": rules}


def _new_flags(call: str) -> tuple[int, ...]:
    return (*CLONE_NEW_FLAGS, CLONE_NEWTIME) if call == "unshare" else CLONE_NEW_FLAGS


def _masked(mask: int, value: int) -> dict[str, Any]:
    """Argument 0 masked by `mask` equals `value` (Docker's profile format)."""
    return {"index": 0, "value": mask, "valueTwo": value, "op": "SCMP_CMP_MASKED_EQ"}


def _deny(names: list[str], code: int, *args: dict[str, Any]) -> dict[str, Any]:
    rule: dict[str, Any] = {"names": names, "action": "SCMP_ACT_ERRNO", "errnoRet": code}
    if args:
        rule["args"] = list(args)
    return rule


def _namespace_rules(calls: list[str]) -> list[dict[str, Any]]:
    """`clone`/`unshare` without any CLONE_NEW* flag, for the calls the engine let through
    (in any form: a rule of its own with conditions is replaced by this one)."""
    rules = []
    for name in calls:
        mask = 0
        for flag in _new_flags(name):
            mask |= flag
        rules.append({"names": [name], "action": "SCMP_ACT_ALLOW", "args": [_masked(mask, 0)]})
    return rules


def engine_default_profile(security_options: list[str], *,
                           is_podman: bool) -> dict[str, Any] | None:
    """The engine's default profile, or None for Docker's built-in one, which already
    refuses every call sandlot denies to a container without CAP_SYS_ADMIN.
    `security_options` is `SecurityOptions` from the engine's /info; the engine runs on
    this host (as the docker backend needs anyway), so a profile it names is read here.

    Raises: EngineSeccompError when the engine has none, or one sandlot cannot read."""
    named = _seccomp_profile(security_options)
    if named is None:
        raise EngineSeccompError(
            "the container engine runs containers without a seccomp profile: sandlot "
            "needs one (enable seccomp in the engine, or use the local sandbox)")
    if named == "unconfined":
        raise EngineSeccompError("the container engine's default seccomp profile is "
                                 "'unconfined': sandlot needs one that filters")
    if named in _DOCKER_BUILTIN:
        if not is_podman:
            return None
        named = str(podman_default_profile_path())
    path = Path(named)
    try:
        profile = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EngineSeccompError(f"cannot read the container engine's seccomp profile "
                                 f"{named}: {exc}") from exc
    if not isinstance(profile, dict):
        raise EngineSeccompError(f"the engine's seccomp profile {path} is not a JSON object")
    return profile


def podman_default_profile_path(etc: Path = Path("/etc/containers"),
                                share: Path = Path("/usr/share/containers")) -> Path:
    """The profile Podman means by "default": containers.conf's `seccomp_profile` (the
    last file that sets it wins, as in Podman), else /etc's seccomp.json over /usr/share's."""
    confs = [share / "containers.conf", etc / "containers.conf",
             *sorted((etc / "containers.conf.d").glob("*.conf"))]
    if os.environ.get("CONTAINERS_CONF"):
        confs.append(Path(os.environ["CONTAINERS_CONF"]))
    chosen: str | None = None
    for conf in confs:
        try:
            table = tomllib.loads(conf.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            continue
        value = (table.get("containers") or {}).get("seccomp_profile")
        if isinstance(value, str) and value:
            chosen = value
    if chosen is not None:
        return Path(chosen)
    override = etc / "seccomp.json"
    return override if override.is_file() else share / "seccomp.json"


def container_seccomp_option(profile: dict[str, Any] | None, *, is_podman: bool,
                             folder: Path) -> str | None:
    """The `SecurityOpt` entry that gives a container `profile` made stricter (None: keep
    the engine's built-in default). Podman's API takes a path to a profile file (written
    under `folder`, named by its content); Docker's takes the profile itself."""
    if profile is None:
        return None
    text = json.dumps(strengthen_profile(profile), sort_keys=True)
    if not is_podman:
        return f"seccomp={text}"
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"seccomp-{digest}.json"
    if not target.is_file():
        partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, target)
    return f"seccomp={target}"


def _seccomp_profile(security_options: list[str]) -> str | None:
    """The profile of an entry such as `name=seccomp,profile=/usr/share/...json`."""
    for entry in security_options:
        fields = dict(part.split("=", 1) for part in str(entry).split(",") if "=" in part)
        if fields.get("name") == "seccomp":
            return fields.get("profile") or "builtin"
    return None
