"""Which host folders a local sandbox masks: a folder inside a hidden one needs no mask."""

from __future__ import annotations

from pathlib import Path

from sandlot.sandbox.local import below, outermost


def test_a_folder_inside_a_hidden_one_is_not_masked_again() -> None:
    folders = [Path("/tmp/jobs/cache"), Path("/tmp"), Path("/tmpfoo/x"), Path("/var/tmp"),
               Path("/tmp/jobs"), Path("/root"), Path("/root")]
    assert outermost(folders) == [Path("/root"), Path("/tmp"), Path("/tmpfoo/x"),
                                  Path("/var/tmp")]


def test_below_means_strictly_inside() -> None:
    assert below(Path("/tmp/a"), [Path("/tmp")])
    assert not below(Path("/tmp"), [Path("/tmp")])
    assert not below(Path("/tmpfoo"), [Path("/tmp")])
    assert below(Path("/etc/ssl/private/key"), [Path("/var"), Path("/etc/ssl/private")])
