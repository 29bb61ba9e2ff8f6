"""Carrying an agent's folder into a fresh sandbox (sandbox/carry.py), on plain folders:
what is kept (files, folders, owners, modes, links that stay inside), what is left out
and named (links that lead out, FIFOs), what is stripped (setuid), and the caps."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from sandlot.sandbox.bounded_fs import CapExceeded, Export, WalkLimits
from sandlot.sandbox.carry import CarryLimits, carry_folder, link_stays_inside

pytestmark = pytest.mark.timeout(60)

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="owners are kept by root only")


def agent_folder(root: Path) -> Path:
    app = root / "agent" / "app"
    (app / "sub").mkdir(parents=True)
    (app / "answer.txt").write_text("42\n")
    (app / "tool").write_text("#!/bin/sh\n")
    (app / "tool").chmod(0o4755)
    (app / "sub" / "data").write_bytes(b"\0" * 1000)
    (app / "sub" / "inside").symlink_to("../answer.txt")
    (app / "sub" / "absolute-inside").symlink_to("/app/answer.txt")
    (app / "out").symlink_to("/tests/expected.txt")
    (app / "up").symlink_to("../etc/passwd")
    os.mkfifo(app / "pipe")
    return app


@needs_root
def test_what_is_kept_stripped_and_left_out(tmp_path: Path):
    app = agent_folder(tmp_path)
    os.chown(app / "answer.txt", 1234, 2345)
    dest = tmp_path / "fresh" / "app"
    dest.mkdir(parents=True)
    (dest / "from-the-image.txt").write_text("the image's\n")
    report = Export()
    carry_folder(app, dest, "/app", report)
    assert (dest / "answer.txt").read_text() == "42\n"
    st = (dest / "answer.txt").stat()
    assert (st.st_uid, st.st_gid) == (1234, 2345)
    assert st.st_mtime_ns == (app / "answer.txt").stat().st_mtime_ns
    assert stat.S_IMODE((dest / "tool").stat().st_mode) == 0o755  # no setuid
    assert os.readlink(dest / "sub" / "inside") == "../answer.txt"
    assert os.readlink(dest / "sub" / "absolute-inside") == "/app/answer.txt"
    assert (dest / "sub" / "data").read_bytes() == b"\0" * 1000
    for gone in ("out", "up", "pipe", "from-the-image.txt"):
        assert not os.path.lexists(dest / gone), gone
    notes = report.summary()
    assert "/app/out: a link to /tests/expected.txt, outside /app" in notes
    assert "/app/up: a link to ../etc/passwd" in notes
    assert "/app/pipe: not a regular file" in notes
    assert report.files == 3 and report.bytes == 1000 + 3 + 10


def test_a_folder_the_agent_never_made_is_not_carried(tmp_path: Path):
    dest = tmp_path / "fresh" / "logs" / "artifacts"
    carry_folder(tmp_path / "missing", dest, "/logs/artifacts", Export())
    assert not dest.exists()


def test_a_file_where_a_folder_is_expected_is_named(tmp_path: Path):
    (tmp_path / "app").write_text("not a folder")
    report = Export()
    carry_folder(tmp_path / "app", tmp_path / "dest", "/app", report)
    assert "not a folder" in report.summary()


@pytest.mark.parametrize("limits", [CarryLimits(max_bytes=999),
                                    CarryLimits(walk=WalkLimits(max_entries=3))])
def test_past_a_cap_the_carry_fails(tmp_path: Path, limits: CarryLimits):
    app = tmp_path / "app"
    app.mkdir()
    for i in range(5):
        (app / f"f{i}").write_bytes(b"x" * 400)
    with pytest.raises(CapExceeded):
        carry_folder(app, tmp_path / "dest", "/app", Export(), limits)


@pytest.mark.parametrize(("link", "target", "inside"), [
    ("/app/a", "b", True),
    ("/app/sub/a", "../b", True),
    ("/app/a", "/app/b", True),
    ("/app/a", ".", True),
    ("/app/a", "..", False),
    ("/app/a", "../etc/passwd", False),
    ("/app/a", "/tests/x", False),
    ("/app/a", "/application/x", False),
    ("/app/sub/a", "../../app/b", True),
])
def test_a_link_is_judged_by_its_own_text(link: str, target: str, inside: bool):
    assert link_stays_inside(link, target, "/app") is inside
