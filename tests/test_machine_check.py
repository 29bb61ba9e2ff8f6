"""The end-of-run check's own parts: what it calls unremovable, and which firewall tables
it leaves to the container engine (the whole check was seen to catch a leaking test)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from machine_check import MAX_REPO_DEPTH, is_engine_table, unremovable

pytestmark = pytest.mark.timeout(60)

NETAVARK_NAT = """table ip nat {
	chain POSTROUTING {
		type nat hook postrouting priority srcnat; policy accept;
		counter packets 872 bytes 53336 jump NETAVARK-HOSTPORT-MASQ
	}
	chain NETAVARK-HOSTPORT-MASQ {
		meta mark & 0x00002000 == 0x00002000 counter packets 0 bytes 0 masquerade
	}
}
"""


def test_only_the_engines_own_chains_are_left_to_it() -> None:
    assert is_engine_table(NETAVARK_NAT)
    extra_rule = NETAVARK_NAT.replace("jump NETAVARK-HOSTPORT-MASQ",
                                      "jump NETAVARK-HOSTPORT-MASQ\n\t\tip daddr 10.0.0.1 drop")
    assert not is_engine_table(extra_rule)
    assert not is_engine_table("table inet sandlot {\n\tchain egress {\n\t}\n}\n")
    assert not is_engine_table("table ip nat {\n\tchain POSTROUTING {\n\t\tmasquerade\n\t}\n}\n")


def test_what_a_plain_rm_rf_cannot_remove_is_found(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "ok.py").write_text("x")
    assert unremovable(repo) == []

    deep = repo / "deep"
    os.makedirs(os.path.join(deep, *(["d"] * (MAX_REPO_DEPTH + 2))))
    found = unremovable(repo)
    assert any("deeper than" in p for p in found), found
    shutil.rmtree(deep)

    target = tmp_path / "elsewhere"
    target.mkdir()
    (repo / "mnt").mkdir()
    subprocess.run(["mount", "--bind", str(target), str(repo / "mnt")], check=True)
    try:
        assert any("mount point" in p and p.endswith("/mnt") for p in unremovable(repo))
    finally:
        subprocess.run(["umount", "-l", str(repo / "mnt")], check=False)

    if shutil.which("chattr") is None:
        return
    locked = repo / "src" / "locked.txt"
    locked.write_text("x")
    if subprocess.run(["chattr", "+i", str(locked)], capture_output=True).returncode != 0:
        return  # a filesystem without the flag (tmpfs): nothing to check there
    try:
        assert any("immutable" in p and p.endswith("locked.txt") for p in unremovable(repo))
    finally:
        subprocess.run(["chattr", "-i", str(locked)], check=True)
