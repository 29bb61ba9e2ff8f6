"""Children die with sandlot, including when sandlot dies between fork and exec."""

from __future__ import annotations

import os
import subprocess

from sandlot.sandbox.procutil import child_setup


def test_a_child_of_a_living_sandlot_runs() -> None:
    assert subprocess.run(["true"], preexec_fn=child_setup()).returncode == 0


def test_a_child_whose_parent_is_already_gone_exits_instead_of_running() -> None:
    """The death signal is armed after fork; a child forked by a process that is not the one
    that prepared the hook (as if sandlot died in that window) must not run its command."""
    setup = child_setup()  # prepared here: the "sandlot" is this process
    marker_read, marker_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # a different parent launches the child
        os.close(marker_read)
        code = subprocess.run(["sh", "-c", f"echo ran >&{marker_write}"],
                              preexec_fn=setup, pass_fds=(marker_write,)).returncode
        os._exit(code)
    os.close(marker_write)
    _, status = os.waitpid(pid, 0)
    ran = os.read(marker_read, 100)
    os.close(marker_read)
    assert os.waitstatus_to_exitcode(status) == 1
    assert ran == b"", "the orphaned child ran its command"
