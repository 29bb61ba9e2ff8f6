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

from .support import REPO, SHELL_AGENT, backend_dockerfile, load, run_sandlot, write_task

pytestmark = [pytest.mark.e2e, pytest.mark.adversarial, pytest.mark.timeout(600)]

TOKEN = secrets.token_hex(6)
#: perl (in every Debian, minbase included) makes the raw calls: add_key, request_key.
KEYS = rf"""
case $(uname -m) in x86_64) nrs="248 249";; aarch64) nrs="217 218";; esac
perl -e '
my ($add, $request) = split / /, $ARGV[0];
# Variables, not literals: perl passes a string by a pointer it must be able to write.
my ($type, $name, $secret) = ("user", "probe-{TOKEN}", "secret-{TOKEN}");
for my $ring (-4, -5, -3) {{  # the user, user-session and session keyrings
  my $r = syscall($add, $type, $name, $secret, length($secret), $ring);
  print "STORE $ring ", ($r > 0 ? "ok" : "$!"), "\n";
}}
for (1 .. 20) {{  # the other trial may store its key meanwhile
  my $r = syscall($request, $type, $name, 0, 0);
  print "READ ", ($r > 0 ? "found" : "$!"), "\n";
  select(undef, undef, undef, 0.1);
}}' "$nrs"
cat /proc/keys /proc/key-users 2>&1
for p in /proc/[0-9]*; do
  echo "proc $p"; tr '\0' '\n' < $p/environ; tr '\0' ' ' < $p/cmdline; readlink $p/cwd
done
mkdir -p /app && echo 41 > /app/answer.txt
"""


@pytest.mark.parametrize("sandbox", ["local", "docker"])
def test_no_key_host_path_or_other_trial_reaches_a_sandbox(cache_dir, tmp_path, record,
                                                           sandbox):
    for name in ("keys-a", "keys-b"):
        write_task(tmp_path / "tasks", name, instruction=KEYS,
                   dockerfile=backend_dockerfile(sandbox))
    proc = run_sandlot(cache_dir, "run", str(tmp_path / "tasks"), "--agent", SHELL_AGENT,
                       "--sandbox", sandbox, "--jobs-dir", str(tmp_path / "jobs"),
                       "--job-name", "k", "-n", "2", timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    for name in ("keys-a", "keys-b"):
        trial = tmp_path / "jobs" / "k" / f"{name}__1"
        assert load(trial / "result.json")["error"] is None
        out = (trial / "agent" / "stdout.txt").read_text()
        stored = [line for line in out.splitlines() if line.startswith("STORE")]
        assert len(stored) == 3, out[:2000]
        # EPERM from sandlot's filter and Docker's profile; Podman's answers ENOSYS.
        denied = all(not line.endswith(" ok") for line in stored)
        record.attempt(f"keyring store ({name}, {sandbox})", denied)
        record.attempt(f"keyring read ({name}, {sandbox})", "READ found" not in out)
        record.attempt(f"host paths in /proc ({name}, {sandbox})", str(REPO) not in out
                       and str(tmp_path) not in out)
        assert denied, out[:2000]
        assert "READ found" not in out
        assert str(REPO) not in out and str(tmp_path) not in out, out[-3000:]
    assert TOKEN not in Path("/proc/keys").read_text(), "a sandbox's key reached the host"
