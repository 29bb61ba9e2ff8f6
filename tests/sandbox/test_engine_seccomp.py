"""The docker backend's container profile: the engine's default with sandlot's denials
added, and the engine refused when it has no profile sandlot can make stricter. What the
profile does to real processes in a container is tested end to end in
tests/adversarial/test_syscall_filter.py (the agent's phase on Podman)."""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any

import pytest

from sandlot.sandbox.engine_seccomp import (
    EngineSeccompError,
    container_seccomp_option,
    engine_default_profile,
    podman_default_profile_path,
    strengthen_profile,
)
from sandlot.sandbox.seccomp import DENIED_CALLS

pytestmark = pytest.mark.timeout(30)

NEW_USER = 0x10000000


def podman_like() -> dict[str, Any]:
    """The shape of containers/common's default: deny by default (ENOSYS), an allow list
    with the namespace, mount and key calls in it, and a conditional rule by capability."""
    return {
        "defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": errno.ENOSYS,
        "archMap": [{"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86"]}],
        "syscalls": [
            {"names": ["read", "write", "clone", "clone3", "unshare", "mount", "keyctl",
                       "setns"], "action": "SCMP_ACT_ALLOW", "args": [], "comment": ""},
            {"names": ["bpf", "perf_event_open"], "action": "SCMP_ACT_ALLOW",
             "includes": {"caps": ["CAP_SYS_ADMIN"]}},
            {"names": ["personality"], "action": "SCMP_ACT_ALLOW",
             "args": [{"index": 0, "value": 0, "valueTwo": 0, "op": "SCMP_CMP_EQ"}]},
            {"names": ["ptrace"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM},
        ],
    }


def passing(profile: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in profile["syscalls"] if r["action"] == "SCMP_ACT_ALLOW"]


def let_through(profile: dict[str, Any], call: str, flags: int) -> bool:
    """What the profile does with `call(flags, ...)`: the deny rules of the same call are
    tried as the kernel's filter would (the more restrictive action wins)."""
    def matches(rule: dict[str, Any]) -> bool:
        return all((flags & a["value"]) == a["valueTwo"] for a in rule.get("args", [])
                   if a["index"] == 0 and a["op"] == "SCMP_CMP_MASKED_EQ")
    rules = [r for r in profile["syscalls"] if call in r["names"] and matches(r)]
    if any(r["action"] != "SCMP_ACT_ALLOW" for r in rules):
        return False
    return bool(rules) or profile["defaultAction"] == "SCMP_ACT_ALLOW"


def test_a_deny_by_default_profile_loses_what_sandlot_denies_and_keeps_the_rest():
    out = strengthen_profile(podman_like())
    allowed = {n for r in passing(out) for n in r["names"]}
    assert not allowed & set(DENIED_CALLS)
    assert {"read", "write", "personality"} <= allowed
    assert not let_through(out, "clone", NEW_USER)
    assert not let_through(out, "unshare", NEW_USER)
    assert not let_through(out, "unshare", 0x80)  # CLONE_NEWTIME, unshare only
    assert let_through(out, "clone", 0x11)  # a plain fork (SIGCHLD)
    assert let_through(out, "unshare", 0x200)  # CLONE_FS: no namespace
    assert not let_through(out, "clone3", 0)
    # clone3 falls to the default, ENOSYS here: the C library then falls back to clone
    assert "clone3" not in allowed and out["defaultErrnoRet"] == errno.ENOSYS
    # the engine's own denials and its other fields stay as they were
    assert {"names": ["ptrace"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1} in out["syscalls"]
    assert out["archMap"] == podman_like()["archMap"]
    # denials are EPERM (the engine's default here is ENOSYS): a rule of their own
    denied = [r for r in out["syscalls"] if r.get("errnoRet") == errno.EPERM
              and "keyctl" in r["names"]]
    assert denied


def test_rules_equal_to_the_default_action_are_not_added():
    """libseccomp refuses a rule whose action is the default one."""
    docker_like = {"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": errno.EPERM,
                   "syscalls": [{"names": ["read", "clone", "mount"],
                                 "action": "SCMP_ACT_ALLOW"}]}
    out = strengthen_profile(docker_like)
    assert not [r for r in out["syscalls"] if r.get("errnoRet") == errno.EPERM]
    assert not let_through(out, "mount", 0)
    assert not let_through(out, "clone", NEW_USER)
    assert let_through(out, "clone", 0x11)
    nosys = dict(podman_like(), syscalls=[])
    assert not [r for r in strengthen_profile(nosys)["syscalls"] if r["names"] == ["clone3"]]


def test_an_allow_by_default_profile_gets_every_denial_as_a_rule():
    out = strengthen_profile({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": []})
    for name in ("keyctl", "mount", "setns", "bpf", "init_module"):
        assert not let_through(out, name, 0), name
    assert not let_through(out, "clone", NEW_USER)
    assert let_through(out, "clone", 0x11)
    assert not passing(out)  # no rule with the default's own action


def test_podman_gets_a_profile_file_and_docker_the_profile_itself(tmp_path: Path):
    option = container_seccomp_option(podman_like(), is_podman=True, folder=tmp_path / "p")
    assert option is not None and option.startswith("seccomp=/")
    written = Path(option.removeprefix("seccomp="))
    assert json.loads(written.read_text()) == strengthen_profile(podman_like())
    again = container_seccomp_option(podman_like(), is_podman=True, folder=tmp_path / "p")
    assert again == option and len(list((tmp_path / "p").iterdir())) == 1
    inline = container_seccomp_option(podman_like(), is_podman=False, folder=tmp_path / "d")
    assert inline is not None
    assert json.loads(inline.removeprefix("seccomp=")) == strengthen_profile(podman_like())
    assert not (tmp_path / "d").exists()
    assert container_seccomp_option(None, is_podman=False, folder=tmp_path / "d") is None


def test_the_engine_profile_is_read_from_the_path_it_names(tmp_path: Path):
    named = tmp_path / "seccomp.json"
    named.write_text(json.dumps(podman_like()))
    options = ["name=apparmor", f"name=seccomp,profile={named}"]
    for is_podman in (True, False):
        assert engine_default_profile(options, is_podman=is_podman) == podman_like()


def test_docker_keeps_its_built_in_default():
    """Docker's built-in default refuses each of sandlot's calls without CAP_SYS_ADMIN."""
    for name in ("builtin", "default"):
        assert engine_default_profile([f"name=seccomp,profile={name}"], is_podman=False) is None


def test_podmans_default_is_the_one_its_configuration_names(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("CONTAINERS_CONF", raising=False)
    etc, share = tmp_path / "etc", tmp_path / "share"
    share.mkdir()
    (share / "seccomp.json").write_text("{}")
    assert podman_default_profile_path(etc, share) == share / "seccomp.json"
    etc.mkdir()
    (etc / "seccomp.json").write_text("{}")
    assert podman_default_profile_path(etc, share) == etc / "seccomp.json"
    (share / "containers.conf").write_text('[containers]\nseccomp_profile = "/a.json"\n')
    (etc / "containers.conf.d").mkdir()
    (etc / "containers.conf.d" / "10-b.conf").write_text(
        '[containers]\nseccomp_profile = "/b.json"\n')
    assert podman_default_profile_path(etc, share) == Path("/b.json")


@pytest.mark.parametrize(("options", "says"), [
    (["name=apparmor"], "without a seccomp profile"),
    (["name=seccomp,profile=unconfined"], "unconfined"),
    (["name=seccomp,profile=/nonexistent/seccomp.json"], "/nonexistent/seccomp.json"),
])
def test_an_engine_without_a_profile_sandlot_can_read_is_refused(options, says):
    with pytest.raises(EngineSeccompError, match=says):
        engine_default_profile(options, is_podman=True)
