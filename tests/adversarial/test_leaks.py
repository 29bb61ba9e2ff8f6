"""Nothing of the host or of another trial reaches a sandbox through state the namespaces
do not split: the kernel's keyrings (one per uid, shared by root everywhere), /proc's
host-wide files, the environment and working directory of the sandbox's processes.

Two trials run side by side: one stores a key, the other looks for it; both also look for
the host's paths in every process's environment, command line and working directory.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from .support import REPO, SHELL_AGENT, load, needs_root_sandbox, run_sandlot, write_task

pytestmark = [pytest.mark.e2e, pytest.mark.adversarial, needs_root_sandbox,
              pytest.mark.timeout(300)]

TOKEN = secrets.token_hex(6)
KEYS = rf"""
python3 - <<'PY'
import ctypes, os, platform, time
libc = ctypes.CDLL(None, use_errno=True)
add_key, request_key, keyctl = {{"x86_64": (248, 249, 250),
                                 "aarch64": (217, 218, 219)}}[platform.machine()]
for ring in (-4, -5, -3):  # the user, user-session and session keyrings
    r = libc.syscall(add_key, b"user", b"probe-{TOKEN}", b"secret-{TOKEN}", 13, ring)
    print(f"STORE {{ring}}", "ok" if r > 0 else os.strerror(ctypes.get_errno()))
for _ in range(20):  # the other trial may store its key meanwhile
    r = libc.syscall(request_key, b"user", b"probe-{TOKEN}", None, 0)
    print("READ", "found" if r > 0 else os.strerror(ctypes.get_errno()))
    time.sleep(0.1)
PY
cat /proc/keys /proc/key-users 2>&1
for p in /proc/[0-9]*; do
  echo "proc $p"; tr '\0' '\n' < $p/environ; tr '\0' ' ' < $p/cmdline; readlink $p/cwd
done
echo 41 > /app/answer.txt
"""


def test_no_key_host_path_or_other_trial_reaches_a_sandbox(cache_dir, tmp_path, record):
    for name in ("keys-a", "keys-b"):
        write_task(tmp_path / "tasks", name, instruction=KEYS)
    proc = run_sandlot(cache_dir, "run", str(tmp_path / "tasks"), "--agent", SHELL_AGENT,
                       "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "k", "-n", "2",
                       timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    for name in ("keys-a", "keys-b"):
        trial = tmp_path / "jobs" / "k" / f"{name}__1"
        assert load(trial / "result.json")["error"] is None
        out = (trial / "agent" / "stdout.txt").read_text()
        stored = [line for line in out.splitlines() if line.startswith("STORE")]
        assert len(stored) == 3, out[:2000]
        record.attempt(f"keyring store ({name})", all(line.endswith("Operation not permitted")
                                                        for line in stored))
        record.attempt(f"keyring read ({name})", "READ found" not in out)
        record.attempt(f"host paths in /proc ({name})", str(REPO) not in out
                       and str(tmp_path) not in out)
        assert all(line.endswith("Operation not permitted") for line in stored), out[:2000]
        assert "READ found" not in out
        assert str(REPO) not in out and str(tmp_path) not in out, out[-3000:]
    assert TOKEN not in Path("/proc/keys").read_text(), "a sandbox's key reached the host"
