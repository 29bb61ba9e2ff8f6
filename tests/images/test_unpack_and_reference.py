"""A layer is untrusted input; an image name is parsed only as far as sandlot decides."""

from __future__ import annotations

import io
import os
import stat
import tarfile
import uuid
from pathlib import Path

import pytest

from sandlot.images.reference import ImageReferenceError, parse_image_ref
from sandlot.images.unpack import LayerUnpackError, unpack_layer

pytestmark = pytest.mark.timeout(60)

# A name no other process on this machine uses, so "nothing landed outside" checks only this test.
ESCAPED = f"escaped-{uuid.uuid4().hex[:12]}"


def layer(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], mode: str = "w:gz"
          ) -> Path:
    with tarfile.open(path, mode) as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def entry(name: str, kind: bytes = tarfile.REGTYPE, *, linkname: str = "", mode: int = 0o644,
          uid: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode, info.uid, info.gid = kind, linkname, mode, uid, uid
    return info


def test_owners_modes_setuid_links_and_an_opaque_folder_are_kept(tmp_path):
    blob = layer(tmp_path / "l.tar.gz", [
        (entry("./", tarfile.DIRTYPE, mode=0o755), None),
        (entry("usr/bin/", tarfile.DIRTYPE, mode=0o755), None),
        (entry("usr/bin/su", mode=0o4755), b"binary"),
        (entry("home/u/file", uid=1000), b"mine"),
        (entry("bin", tarfile.SYMTYPE, linkname="usr/bin"), None),
        (entry("etc/alt", tarfile.SYMTYPE, linkname="/usr/bin/su"), None),
        (entry("usr/bin/su2", tarfile.LNKTYPE, linkname="usr/bin/su", mode=0o4755), None),
        (entry("var/cache/.wh..wh..opq"), b""),
        (entry("dev/null", tarfile.CHRTYPE), None),
    ])
    dest = tmp_path / "out"
    unpack_layer(blob, dest)
    su = os.stat(dest / "usr/bin/su")
    assert su.st_mode & 0o7777 == 0o4755
    assert os.stat(dest / "home/u/file").st_uid == 1000
    assert os.readlink(dest / "bin") == "usr/bin"
    assert os.readlink(dest / "etc/alt") == "/usr/bin/su"  # absolute: the sandbox's own
    assert os.stat(dest / "usr/bin/su2").st_ino == su.st_ino
    assert os.getxattr(dest / "var/cache", "trusted.overlay.opaque") == b"y"
    assert not (dest / "dev" / "null").exists()  # device nodes are left out


def test_a_whiteout_becomes_an_overlay_whiteout(tmp_path):
    dest = tmp_path / "out"
    unpack_layer(layer(tmp_path / "l.tar", [(entry("etc/.wh.passwd"), b"")], "w"), dest)
    node = os.lstat(dest / "etc" / "passwd")
    assert stat.S_ISCHR(node.st_mode) and node.st_rdev == os.makedev(0, 0)
    assert not (dest / "etc" / ".wh.passwd").exists()


@pytest.mark.parametrize("members", [
    [(entry(f"../{ESCAPED}"), b"x")],
    [(entry(f"a/../../{ESCAPED}"), b"x")],
    [(entry("link", tarfile.SYMTYPE, linkname="/tmp"), None), (entry(f"link/{ESCAPED}"), b"x")],
    [(entry("link", tarfile.SYMTYPE, linkname="../.."), None), (entry(f"link/{ESCAPED}"), b"x")],
    [(entry("hard", tarfile.LNKTYPE, linkname="../outside/secret"), None)],
    [(entry("link", tarfile.SYMTYPE, linkname=".."), None),
     (entry("hard", tarfile.LNKTYPE, linkname="link/outside/secret"), None)],
    [(entry("link", tarfile.SYMTYPE, linkname="/tmp"), None), (entry(f"link/.wh.{ESCAPED}"), b"")],
], ids=["dotdot", "nested-dotdot", "through-absolute-link", "through-relative-link",
        "hardlink-out", "hardlink-through-link", "whiteout-through-link"])
def test_a_member_that_would_land_outside_fails_the_unpack(tmp_path, members):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("host\n")
    dest = tmp_path / "layers" / "out"
    with pytest.raises(LayerUnpackError):
        unpack_layer(layer(tmp_path / "bad.tar", members, "w"), dest)
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    assert (outside / "secret").read_text() == "host\n"
    assert not (tmp_path / ESCAPED).exists() and not (tmp_path / "layers" / ESCAPED).exists()
    assert not Path("/tmp", ESCAPED).exists()


def test_a_blob_that_is_not_a_tar_is_a_clear_error(tmp_path):
    blob = tmp_path / "junk"
    blob.write_bytes(b"\x28\xb5\x2f\xfd not a tar")
    with pytest.raises(LayerUnpackError, match="cannot read layer junk"):
        unpack_layer(blob, tmp_path / "out")


@pytest.mark.parametrize(("text", "registry", "repository", "tag", "digest", "loopback"), [
    ("debian:12", None, "debian", "12", None, False),
    ("python", None, "python", "latest", None, False),
    ("library/python:3.12-slim", None, "library/python", "3.12-slim", None, False),
    ("127.0.0.1:5000/test/base:1", "127.0.0.1:5000", "test/base", "1", None, True),
    ("localhost/x", "localhost", "x", "latest", None, True),
    ("127.9.0.1:80/x:y", "127.9.0.1:80", "x", "y", None, True),
    ("[::1]:5000/x:1", "[::1]:5000", "x", "1", None, True),
    ("ghcr.example/org/img@sha256:" + "a" * 64, "ghcr.example", "org/img", None,
     "sha256:" + "a" * 64, False),
    ("reg.example:5000/a/b:t@sha256:" + "b" * 64, "reg.example:5000", "a/b", "t",
     "sha256:" + "b" * 64, False),
])
def test_references_split_into_registry_repository_tag_digest(text, registry, repository, tag,
                                                               digest, loopback):
    ref = parse_image_ref(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (registry, repository, tag,
                                                                  digest)
    assert ref.on_loopback is loopback


@pytest.mark.parametrize("text", ["", "UPPER/case", "x@sha256:short", "x:bad tag", "a//b",
                                  "x@md5:" + "a" * 32])
def test_bad_references_are_refused_with_the_reason(text):
    with pytest.raises(ImageReferenceError):
        parse_image_ref(text)
