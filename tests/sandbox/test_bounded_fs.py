"""Reading an agent's files from the host: no link followed, nothing that blocks, no
recursion, every cap a CapExceeded (the trial then fails closed), never a partial answer."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from sandlot.sandbox.bounded_fs import (
    CapExceeded,
    WalkLimits,
    exists_inside,
    export_tree,
    read_regular,
    walk,
)
from sandlot.sandbox.changes import Change, walk_upper

pytestmark = pytest.mark.timeout(60)


def deep_tree(root: Path, depth: int) -> str:
    """`depth` nested folders made through a folder fd (paths longer than PATH_MAX are
    fine that way); returns the innermost one's path inside `root`."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        with open(os.open("leaf.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as f:
            f.write("x")
    finally:
        os.close(fd)
    return "/d" * depth


def test_a_walk_lists_entries_and_never_follows_a_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "secret").mkdir(parents=True)
    (outside / "secret" / "key.txt").write_text("host secret")
    root = tmp_path / "root"
    (root / "app").mkdir(parents=True)
    (root / "app" / "a.txt").write_text("a")
    (root / "app" / "to-host").symlink_to(outside)
    paths = {e.path: e for e in walk(root)}
    assert set(paths) == {"/app", "/app/a.txt", "/app/to-host"}
    assert paths["/app"].is_dir and not paths["/app/to-host"].is_dir


def test_a_tree_deeper_than_the_cap_is_cap_exceeded_not_a_recursion_error(
        tmp_path: Path) -> None:
    deep_tree(tmp_path, 1200)  # deeper than Python's recursion limit
    with pytest.raises(CapExceeded, match="deeper than 256"):
        list(walk(tmp_path))
    # Under the cap the whole tree is listed, leaf included.
    shallow = tmp_path / "shallow"
    shallow.mkdir()
    leaf = deep_tree(shallow, 200) + "/leaf.txt"
    assert leaf in {e.path for e in walk(shallow)}


def test_more_entries_than_the_cap_is_cap_exceeded(tmp_path: Path) -> None:
    for i in range(50):
        (tmp_path / f"f{i}").touch()
    assert len(list(walk(tmp_path, WalkLimits(max_entries=50)))) == 50
    with pytest.raises(CapExceeded, match="more than 49 entries"):
        list(walk(tmp_path, WalkLimits(max_entries=49)))


def test_a_regular_file_is_read_and_anything_else_is_none(tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "ok.txt").write_text("fine")
    (tmp_path / "app" / "link").symlink_to("/etc/hostname")
    (tmp_path / "linked-dir").symlink_to(tmp_path / "app")
    os.mkfifo(tmp_path / "app" / "fifo")
    (tmp_path / "app" / "fifo-link").symlink_to(tmp_path / "app" / "fifo")
    assert read_regular(tmp_path, "/app/ok.txt", 100) == b"fine"
    assert read_regular(tmp_path, "/app/link", 100) is None
    assert read_regular(tmp_path, "/linked-dir/ok.txt", 100) is None  # a link on the way
    assert read_regular(tmp_path, "/app", 100) is None
    assert read_regular(tmp_path, "/app/missing", 100) is None
    assert read_regular(tmp_path, "/app/../app/ok.txt", 100) is None


def test_a_fifo_does_not_block_its_reader(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.pth")
    answer: list[object] = []
    reader = threading.Thread(target=lambda: answer.append(
        read_regular(tmp_path, "/pipe.pth", 100)), daemon=True)
    reader.start()
    reader.join(10)
    assert answer == [None], "reading a FIFO blocked"


def test_a_sparse_giant_is_measured_without_being_read(tmp_path: Path) -> None:
    with open(tmp_path / "sparse.bin", "wb") as f:
        f.truncate(4 << 30)  # 4 GB that take no disk
    with pytest.raises(CapExceeded, match="4294967296 bytes"):
        read_regular(tmp_path, "/sparse.bin", 1_000_000)
    (tmp_path / "exact.bin").write_bytes(b"y" * 1000)
    assert read_regular(tmp_path, "/exact.bin", 1000) == b"y" * 1000
    with pytest.raises(CapExceeded):
        read_regular(tmp_path, "/exact.bin", 999)


def test_exists_inside_sees_links_without_following_them(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "dangling").symlink_to("/nonexistent")
    (tmp_path / "via").symlink_to(tmp_path / "dir")
    assert exists_inside(tmp_path, "/dir/dangling")
    assert not exists_inside(tmp_path, "/via/dangling")
    assert not exists_inside(tmp_path, "/dir/missing")


def test_the_upper_walk_classifies_changes_and_stops_at_a_cap(tmp_path: Path) -> None:
    base, upper = tmp_path / "base", tmp_path / "upper"
    (base / "etc").mkdir(parents=True)
    (base / "etc" / "old.conf").write_text("old")
    (upper / "etc").mkdir(parents=True)
    (upper / "etc" / "old.conf").write_text("new")
    (upper / "etc" / "new.conf").write_text("added")
    (upper / "etc" / "link").symlink_to("/etc/shadow")
    assert walk_upper(upper, [base], {"/etc/new.conf"}) == [
        Change("/etc/link", "added"), Change("/etc/old.conf", "modified")]
    deep_tree(upper, 300)
    with pytest.raises(CapExceeded):
        walk_upper(upper, [base], set())


def test_an_export_copies_plain_data_and_lists_what_it_left_out(tmp_path: Path) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "log.txt").write_text("hello")
    (src / "tool").write_text("#!/bin/sh\n")
    (src / "tool").chmod(0o4755)
    (src / "big.bin").write_bytes(b"z" * 5000)
    (src / "host").symlink_to("/etc/hostname")
    os.mkfifo(src / "fifo")
    report = export_tree(src, dest, max_bytes=1000)
    assert (dest / "sub" / "log.txt").read_text() == "hello"
    assert (dest / "tool").stat().st_mode & 0o7777 == 0o755  # no setuid out of a sandbox
    assert (dest / "host").read_text() == "[a symlink in the sandbox, to /etc/hostname]\n"
    assert not (dest / "big.bin").exists() and not (dest / "fifo").exists()
    assert report.files == 2 and report.bytes == len("hello") + len("#!/bin/sh\n")
    notes = report.summary()
    assert "/big.bin: 5000 bytes, past the 1000-byte cap" in notes
    assert "/fifo: not a regular file" in notes


def test_an_export_of_a_tree_too_deep_keeps_what_it_copied_and_says_where_it_stopped(
        tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    deep_tree(src, 400)
    report = export_tree(src, tmp_path / "dest", max_bytes=10_000)
    assert "stopped: folders nested deeper than 256" in report.summary()
    assert (tmp_path / "dest" / ("d/" * 200)).is_dir()  # what it copied stays
