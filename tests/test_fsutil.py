"""copy_out: what a sandbox wrote reaches the host as plain data."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from sandlot.fsutil import copy_out


def test_copy_out_keeps_plain_files_and_defuses_the_rest(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "data.txt").write_text("kept")
    tool = src / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o4755)  # setuid, as a sandbox's root could leave it
    (src / "link").symlink_to("/etc/passwd")
    os.mkfifo(src / "pipe")
    deep = src
    for _ in range(1100):  # deeper than Python's recursion limit (1000)
        deep = deep / "d"
        deep.mkdir()
    (deep / "bottom.txt").write_text("bottom")
    try:
        copy_out(src, dst)
        assert (dst / "sub" / "data.txt").read_text() == "kept"
        assert stat.S_IMODE((dst / "tool").stat().st_mode) == 0o755
        assert not (dst / "link").is_symlink()
        assert "/etc/passwd" in (dst / "link").read_text()
        assert not (dst / "pipe").exists()
        assert (dst / Path(*["d"] * 1100) / "bottom.txt").read_text() == "bottom"
    finally:  # shutil.rmtree (pytest's cleanup) recurses: too deep for it
        for root in (src, dst):
            _remove_tree_iteratively(root)


def _remove_tree_iteratively(top: Path) -> None:
    """Remove a tree of any depth, deepest entries first, without recursion."""
    if not top.exists():
        return
    stack: list[tuple[str, bool]] = [(str(top), False)]
    while stack:
        path, emptied = stack.pop()
        if emptied:
            os.rmdir(path)
            continue
        stack.append((path, True))
        for entry in os.scandir(path):
            if entry.is_dir(follow_symlinks=False):
                stack.append((entry.path, False))
            else:
                os.unlink(entry.path)


def test_copy_out_of_nothing_makes_an_empty_folder(tmp_path: Path) -> None:
    copy_out(tmp_path / "missing", tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []
