"""The host-safety guards refuse what could reach beyond what sandlot made (real mounts,
real processes, real cgroups and network namespaces; root required, as for the sandboxes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandlot.hostguard import (
    HostSafetyError,
    check_cgroup_is_ours,
    check_private_netns,
    mounts_under,
    remove_tree,
    signal_child_group,
)
from sandlot.sandbox import cgroups
from sandlot.trees import disk_usage

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def bind_mounted(tmp_path: Path):
    """scratch/inner is a bind mount of a folder holding a file that must survive."""
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep.txt").write_text("the host's data")
    scratch = tmp_path / "scratch with space"
    (scratch / "inner").mkdir(parents=True)
    (scratch / "own.txt").write_text("scratch")
    subprocess.run(["mount", "--bind", str(precious), str(scratch / "inner")], check=True)
    try:
        yield scratch, precious
    finally:
        subprocess.run(["umount", "-l", str(scratch / "inner")], check=False)


def test_a_tree_with_a_bind_mount_inside_is_refused_not_deleted_through(bind_mounted) -> None:
    scratch, precious = bind_mounted
    assert mounts_under(scratch) == [str(scratch / "inner")]
    with pytest.raises(HostSafetyError, match="mount"):
        remove_tree(scratch)
    assert remove_tree(scratch, ignore_errors=True) is False
    assert (precious / "keep.txt").read_text() == "the host's data"
    assert (scratch / "own.txt").exists(), "refused as a whole, not half-deleted"


def test_a_tree_without_mounts_is_removed_and_symlinks_are_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("x")
    tree = tmp_path / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "a" / "b" / "f").write_text("y")
    (tree / "link").symlink_to(outside)
    assert remove_tree(tree) is True
    assert not tree.exists()
    assert (outside / "keep.txt").exists()
    assert remove_tree(tree) is True  # already gone is fine


def test_a_tree_an_agent_left_in_any_shape_is_removed(tmp_path: Path) -> None:
    """Deeper than Python's recursion, FIFOs, sockets, modes 000, an immutable file."""
    import socket

    tree = tmp_path / "tree"
    tree.mkdir()
    fd = os.open(tree, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(3000):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.mkfifo("fifo", dir_fd=fd)
    os.close(fd)
    (tree / "locked" / "inner").mkdir(parents=True)
    (tree / "locked" / "inner" / "f").write_text("x")
    (tree / "locked" / "inner").chmod(0)
    (tree / "locked").chmod(0)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tree / "sock"))
    frozen = tree / "frozen.txt"
    frozen.write_text("x")
    chattr = subprocess.run(["chattr", "+i", str(frozen)], capture_output=True)
    try:
        assert disk_usage(tree) >= 1000 * 4096  # measured without recursion (to PATH_MAX)
        assert remove_tree(tree) is True
        assert not tree.exists()
    finally:  # a failed removal must not leave an immutable file for the suite to trip on
        subprocess.run(["chattr", "-i", str(frozen)], capture_output=True)
    if chattr.returncode != 0:
        pytest.skip(f"this file system has no immutable flag: {chattr.stderr!r}")


def test_a_signal_goes_only_to_a_group_sandlot_spawned_and_still_owns() -> None:
    child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        stranger = subprocess.Popen(["sleep", "60"])  # our child, but not a group leader
        try:
            assert signal_child_group(stranger.pid, signal.SIGKILL) is False
            assert stranger.poll() is None
        finally:
            stranger.kill()
            stranger.wait()
        assert signal_child_group(1, signal.SIGTERM) is False  # not our child: refused
        assert signal_child_group(child.pid, signal.SIGKILL) is True
        assert child.wait(timeout=10) == -signal.SIGKILL
        # Reaped: the number may be anyone's now, so nothing is sent.
        assert signal_child_group(child.pid, signal.SIGKILL) is False
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_a_cgroup_outside_sandlots_parent_is_refused(tmp_path: Path) -> None:
    parent = tmp_path / "sandlot"
    (parent / "123-trial").mkdir(parents=True)
    check_cgroup_is_ours(parent / "123-trial", [parent])
    for outside in (tmp_path, parent, parent / "123-trial" / "..", tmp_path / "other",
                    Path("/sys/fs/cgroup/memory")):
        with pytest.raises(HostSafetyError, match="cgroup"):
            check_cgroup_is_ours(outside, [parent])


def test_cgroup_teardown_refuses_a_group_it_did_not_make() -> None:
    base = cgroups.sandlot_parent("pids")
    if base is None:
        pytest.skip("no writable pids cgroup here")
    stranger_group = base.parent / f"not-sandlot-{os.getpid()}"
    stranger_group.mkdir()
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        (stranger_group / "cgroup.procs").write_text(str(stranger.pid))
        with pytest.raises(HostSafetyError):
            cgroups.kill_and_remove(stranger_group)
        assert stranger.poll() is None, "a process in a group sandlot did not make was killed"
    finally:
        stranger.kill()
        stranger.wait()
        stranger_group.rmdir()


def test_the_hosts_network_namespace_is_never_configured() -> None:
    with pytest.raises(HostSafetyError, match="host's network namespace"):
        check_private_netns(os.getpid())
    with pytest.raises(HostSafetyError, match="gone"):
        check_private_netns(2 ** 22 + 1)
    own_netns = subprocess.Popen(["unshare", "--net", "--", sys.executable, "-c",
                                  "import time; time.sleep(30)"])
    try:
        for _ in range(100):  # until unshare has made the namespace and exec'd
            try:
                if Path(f"/proc/{own_netns.pid}/exe").resolve().name.startswith("python"):
                    break
            except OSError:
                pass
            time.sleep(0.05)
        check_private_netns(own_netns.pid)
    finally:
        own_netns.kill()
        own_netns.wait()
