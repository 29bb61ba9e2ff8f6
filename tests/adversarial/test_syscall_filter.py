"""The kernel calls no sandbox process may make, tried as an ordinary task: its solve.sh
(the agent's phase) and its test.sh (the verifier's phase) each try a new user, mount or
network namespace, joining a namespace, mounting, the kernel's keyrings, bpf, perf and
kernel modules, on both backends. Every attempt must fail; the controls (a fork, an
ordinary call) must work, or a "blocked" could just be a broken probe.
"""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

from .support import backend_dockerfile, load, run_sandlot, write_task

pytestmark = [pytest.mark.e2e, pytest.mark.adversarial, pytest.mark.timeout(600)]

#: Raw calls through perl (in every Debian, minbase included); each in a child of its own
#: (a call that succeeds changes the caller). An errno of EPERM (sandlot's filter, Docker's
#: profile) or ENOSYS (Podman's profile, a kernel without the call) is a refusal.
PROBE = r"""
probe() {  # probe OUT: one NAME=reached|blocked line per attempt
case $(uname -m) in
  x86_64) nrs="272 308 165 321 298 250 175 39";;
  aarch64) nrs="97 268 40 280 241 219 105 172";;
esac
perl -e '
use POSIX ();
$| = 1;
my ($unshare, $setns, $mount, $bpf, $perf, $keyctl, $init, $getpid) = split / /, $ARGV[0];
open(my $ns, "<", "/proc/self/ns/net") or die;
# No such filesystem type: a mount that passes the permission check fails with ENODEV.
my ($none, $where, $type, $image) = ("none", "/tmp", "sandlot-no-such-fs", "");
my @probes = (
  ["control-getpid", sub { syscall($getpid) }],
  ["unshare-user", sub { syscall($unshare, 0x10000000) }],
  ["unshare-mount", sub { syscall($unshare, 0x00020000) }],
  ["unshare-net", sub { syscall($unshare, 0x40000000) }],
  ["setns", sub { syscall($setns, fileno($ns), 0) }],
  ["mount", sub { syscall($mount, $none, $where, $type, 0, 0) }],
  ["bpf", sub { syscall($bpf, 99, 0, 0) }],
  ["perf-event-open", sub { syscall($perf, 0, -1, -1, -1, 0) }],
  ["keyctl", sub { syscall($keyctl, 0, -4) }],
  ["init-module", sub { syscall($init, 0, 0, $image) }],
);
for my $p (@probes) {
  my ($name, $call) = @$p;
  my $pid = fork();
  if ($pid == 0) {
    my $r = $call->();
    my $e = $! + 0;
    print "$name=", ($r >= 0 || ($e != POSIX::EPERM && $e != POSIX::ENOSYS)
                     ? "reached" : "blocked"), "\n";
    POSIX::_exit(0);
  }
  waitpid($pid, 0);
}' "$nrs" > "$1"
if unshare -Ur true 2>/dev/null; then r=reached; else r=blocked; fi
echo "unshare-command=$r" >> "$1"
if unshare -Urm sh -c "mount -t tmpfs none /tmp" 2>/dev/null; then r=reached; else r=blocked; fi
echo "unshare-and-mount=$r" >> "$1"
}
"""
SOLVE_SH = PROBE + "mkdir -p /app && probe /app/agent-probe.txt\n"
TEST_SH = PROBE + ("probe /logs/verifier/verify-probe.txt\n"
                   "cp /app/agent-probe.txt /logs/verifier/agent-probe.txt\n"
                   "echo 0 > /logs/verifier/reward.txt\n")


def answers(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64"),
                    reason="the probe's raw call numbers are x86-64's and arm64's")
@pytest.mark.parametrize("sandbox", ["local", "docker"])
def test_no_phase_makes_a_denied_kernel_call(cache_dir, tmp_path, record, sandbox):
    write_task(tmp_path / "tasks", "calls", solve_sh=SOLVE_SH, test_sh=TEST_SH,
               dockerfile=backend_dockerfile(sandbox))
    proc = run_sandlot(cache_dir, "run", str(tmp_path / "tasks"), "--agent", "oracle",
                       "--sandbox", sandbox, "--jobs-dir", str(tmp_path / "jobs"),
                       "--job-name", "calls", timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    trial = tmp_path / "jobs" / "calls" / "calls__1"
    assert load(trial / "result.json")["error"] is None
    logs = trial / "verifier" / "logs"
    for phase in ("agent", "verify"):
        seen = answers(logs / f"{phase}-probe.txt")
        assert seen.pop("control-getpid") == "reached", seen  # the probe itself works
        assert len(seen) == 11, seen
        reached = record.attempts({f"{phase} phase: {name} ({sandbox})": value == "blocked"
                                   for name, value in seen.items()})
        assert not reached, reached
