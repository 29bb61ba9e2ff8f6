"""Children die with sandlot, including when sandlot dies between fork and exec; they join
their cgroups before the command runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandlot.sandbox.cgroups import sweep_stale
from sandlot.sandbox.procutil import CGROUP_JOIN_FAILED, die_with_sandlot, in_cgroups


def test_a_child_of_a_living_sandlot_runs_its_command() -> None:
    out = subprocess.run(die_with_sandlot(["sh", "-c", 'echo "ran $0 $1"', "a b", "c"]),
                         capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout == "ran a b c\n"


def test_a_child_whose_parent_is_already_gone_exits_instead_of_running() -> None:
    """A child launched by a process other than the one that built the prefix (as if
    sandlot died between fork and exec, and the child now has another parent) must not
    run its command: nothing would ever kill it."""
    argv = die_with_sandlot(["sh", "-c", "echo ran"])  # built here: this is "sandlot"
    pid = os.fork()
    if pid == 0:  # another parent launches it
        code = subprocess.run(argv, stdout=subprocess.DEVNULL).returncode
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 1


def test_the_child_joins_its_cgroups_before_the_command(tmp_path: Path) -> None:
    procs = [tmp_path / "memory.procs", tmp_path / "pids.procs"]
    out = subprocess.run(die_with_sandlot(["sh", "-c", "echo $$"], [str(p) for p in procs]),
                         capture_output=True, text=True)
    assert out.returncode == 0
    assert [p.read_text() for p in procs] == [out.stdout] * 2  # the pid that ran the command


def test_a_command_in_a_sandbox_joins_its_cgroups_before_it_runs(tmp_path: Path) -> None:
    """in_cgroups (how a sandbox's commands start: they die with its holder, not by a
    death signal of their own) joins the cgroups first, or stops the launch."""
    procs = [tmp_path / "memory.procs", tmp_path / "pids.procs"]
    out = subprocess.run(in_cgroups(["sh", "-c", "echo $$"], [str(p) for p in procs]),
                         capture_output=True, text=True)
    assert out.returncode == 0
    assert [p.read_text() for p in procs] == [out.stdout] * 2
    gone = subprocess.run(in_cgroups(["sh", "-c", "echo ran"],
                                     [str(tmp_path / "gone" / "cgroup.procs")]),
                          capture_output=True, text=True)
    assert gone.returncode == CGROUP_JOIN_FAILED and gone.stdout == ""


def test_a_cgroup_that_cannot_be_joined_stops_the_launch(tmp_path: Path) -> None:
    out = subprocess.run(die_with_sandlot(["sh", "-c", "echo ran"],
                                          [str(tmp_path / "gone" / "cgroup.procs")]),
                         capture_output=True, text=True)
    assert out.returncode == CGROUP_JOIN_FAILED and out.stdout == ""
    assert out.stderr.startswith("sandlot: cannot join cgroup")


def test_the_child_is_killed_when_sandlot_is(tmp_path: Path) -> None:
    """A stand-in sandlot starts a long command through the prefix and is SIGKILLed."""
    pid_file = tmp_path / "child.pid"
    code = ("import subprocess, sys, time\n"
            "from sandlot.sandbox.procutil import die_with_sandlot\n"
            f"subprocess.Popen(die_with_sandlot(['sh', '-c', 'echo $$ > {pid_file}; "
            "exec sleep 600']))\n"
            "time.sleep(600)\n")
    sandlot = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 10
    while not (pid_file.exists() and pid_file.read_text().strip()):
        assert time.monotonic() < deadline, "the child never started"
        time.sleep(0.02)
    child = int(pid_file.read_text())
    sandlot.send_signal(signal.SIGKILL)
    sandlot.wait()
    deadline = time.monotonic() + 10
    while _alive(child):
        assert time.monotonic() < deadline, f"pid {child} outlived its sandlot"
        time.sleep(0.02)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_a_process_in_the_sandbox_that_escaped_every_tie_dies_with_sandlot(tmp_path: Path,
                                                                            ) -> None:
    """The orphan race: bwrap's own child arms its death signal only after clone(), so a
    sandlot killed in between left it running. Whatever runs in a local sandbox is in the
    holder's PID namespace, which the kernel empties when sandlot dies. A stand-in sandlot
    puts a process there with no death signal, in its own session, then is SIGKILLed."""
    if os.geteuid() != 0:
        pytest.skip("the local sandbox needs root")
    pid_file = tmp_path / "escaped.pid"
    code = f"""
import asyncio, subprocess, time
from pathlib import Path
from sandlot.sandbox.base import SandboxSpec
from sandlot.sandbox.local import LocalSandbox

async def main():
    box = LocalSandbox(SandboxSpec(name="escape", workdir="/app"),
                       Path({str(tmp_path / "scratch")!r}))
    await box.start()
    holder = box._holder.pid
    subprocess.Popen(["nsenter", f"--pid=/proc/{{holder}}/ns/pid_for_children",
                      "setsid", "sleep", "600"],
                     start_new_session=True)
    time.sleep(0.3)
    kids = Path(f"/proc/{{holder}}/task/{{holder}}/children").read_text().split()
    Path({str(pid_file)!r}).write_text(" ".join(kids))
    await asyncio.sleep(600)

asyncio.run(main())
"""
    sandlot = subprocess.Popen([sys.executable, "-c", code])
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text().strip()):
        assert time.monotonic() < deadline and sandlot.poll() is None, "never started"
        time.sleep(0.05)
    escaped = _processes_in_pidns_of(int(pid_file.read_text().split()[0]))
    assert any("sleep" in cmd for cmd in escaped.values()), escaped
    sandlot.send_signal(signal.SIGKILL)
    sandlot.wait()
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in escaped):
        assert time.monotonic() < deadline, f"outlived their sandlot: {escaped}"
        time.sleep(0.05)
    sweep_stale()  # the dead stand-in's cgroups, as the next sandlot start would


def _processes_in_pidns_of(pid: int) -> dict[int, str]:
    """Every process (host pid: command line) in the PID namespace of `pid`."""
    ns = os.readlink(f"/proc/{pid}/ns/pid")
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "ns/pid") == ns:
                    found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(
                        b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
    return found
