"""The local sandbox's syscall filter, loaded by a real bwrap: the kernel's key calls fail
with EPERM in every calling convention, everything else runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sandlot.sandbox.seccomp import NoFilterForMachine, key_management_filter

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")]

PROBE = r"""
import ctypes, os, platform
libc = ctypes.CDLL(None, use_errno=True)
numbers = {"x86_64": (248, 249, 250), "aarch64": (217, 218, 219)}[platform.machine()]
calls = {"add_key": (numbers[0], b"user", b"sandlot-seccomp-probe", b"x", 1, -4),
         "request_key": (numbers[1], b"user", b"sandlot-seccomp-probe", None, 0),
         "keyctl": (numbers[2], 0, -4)}  # KEYCTL_GET_KEYRING_ID of the user keyring
if platform.machine() == "x86_64":  # the x32 convention: bit 30 set
    calls["x32 keyctl"] = (0x40000000 | numbers[2], 0, -4)
for name, args in calls.items():
    result = libc.syscall(*args)
    print(name, result, os.strerror(ctypes.get_errno()) if result < 0 else "ok")
print("getpid", os.getpid() > 0)
"""


def run_filtered(tmp_path: Path, code: str) -> subprocess.CompletedProcess[str]:
    program = tmp_path / "filter.bpf"
    program.write_bytes(key_management_filter())
    fd = os.open(program, os.O_RDONLY)
    try:
        return subprocess.run(
            ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
             "--seccomp", str(fd), "--", sys.executable, "-I", "-c", code],
            capture_output=True, text=True, timeout=30, pass_fds=(fd,))
    finally:
        os.close(fd)


def test_key_calls_are_denied_and_the_rest_runs(tmp_path: Path) -> None:
    proc = run_filtered(tmp_path, PROBE)
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines()
                 if not line.startswith("x32"))
    for name in ("add_key", "request_key", "keyctl"):
        assert lines[name] == "-1 Operation not permitted", proc.stdout
    if "x32 keyctl" in proc.stdout:
        assert "x32 keyctl -1 Operation not permitted" in proc.stdout
    assert lines["getpid"] == "True"


def test_a_machine_without_a_filter_is_refused() -> None:
    with pytest.raises(NoFilterForMachine, match="riscv64"):
        key_management_filter("riscv64")
    assert len(key_management_filter("aarch64")) % 8 == 0
