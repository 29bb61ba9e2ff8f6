"""One image layer (a tar, maybe gzip- or zstd-compressed) unpacked into a folder that
overlayfs can stack.

OCI whiteouts become overlayfs's own: `.wh.NAME` a 0:0 character device at NAME, and
`.wh..wh..opq` the `trusted.overlay.opaque` attribute on its folder. A layer is untrusted
input: a member that would land outside the folder (`..`, a path through a symlink the
layer made, a hard link out) fails the unpack, and device nodes are left out (an image's
/dev is the sandbox's to make).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tarfile
from collections.abc import Iterator
from pathlib import Path

import zstandard

from sandlot.hostguard import remove_tree

WHITEOUT_PREFIX = ".wh."
OPAQUE_MARKER = ".wh..wh..opq"
_OPAQUE_XATTR = "trusted.overlay.opaque"
#: How a zstd frame starts (an OCI `tar+zstd` layer).
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


class LayerUnpackError(Exception):
    """The layer cannot be unpacked safely (or is not a tar sandlot can read)."""


def _inside(root: str, path: str) -> bool:
    return path == root or path.startswith(root + os.sep)


def _target(root: str, name: str) -> str:
    """Where member `name` lands, refusing anything that would leave `root`."""
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise LayerUnpackError(f"member {name!r} points outside the layer")
    if not parts:
        return root
    path = os.path.join(root, *parts)
    # A symlink the layer made earlier must not carry later members out of the folder.
    if not _inside(root, os.path.realpath(os.path.dirname(path))):
        raise LayerUnpackError(f"member {name!r} goes through a symlink out of the layer")
    return path


def unpack_layer(blob: Path, dest: Path) -> None:
    """Unpack the layer tar at `blob` (plain, gzip, zstd, bzip2 or xz) into `dest` (which must
    not exist yet), as root, owners kept by number.

    Raises: LayerUnpackError for an unsafe member or a tar that cannot be read.
    """
    dest.mkdir(parents=True)
    root = os.path.realpath(dest)
    try:
        with _open_layer(blob) as tar:
            for member in tar:
                _unpack_member(tar, member, root)
    except (tarfile.TarError, EOFError, OSError, zstandard.ZstdError) as exc:
        raise LayerUnpackError(f"cannot read layer {blob.name}: {exc}") from exc


@contextlib.contextmanager
def _open_layer(blob: Path) -> Iterator[tarfile.TarFile]:
    """The layer's tar: read as a stream through zstd when it is zstd-compressed (which
    tarfile cannot open by itself), else by tarfile (which knows the others)."""
    with open(blob, "rb") as fh:
        if fh.read(4) == _ZSTD_MAGIC:
            fh.seek(0)
            with zstandard.ZstdDecompressor().stream_reader(fh) as stream, \
                    tarfile.open(fileobj=stream, mode="r|") as tar:
                yield tar
            return
    with tarfile.open(blob, mode="r:*") as tar:
        yield tar


def _unpack_member(tar: tarfile.TarFile, member: tarfile.TarInfo, root: str) -> None:
    path = _target(root, member.name)
    if path == root:
        if not member.isdir():
            raise LayerUnpackError(f"member {member.name!r} would replace the layer's root")
        return  # the root folder's own entry: the sandbox's root is the overlay's
    base = os.path.basename(path)
    parent = os.path.dirname(path)
    if base == OPAQUE_MARKER:
        os.makedirs(parent, exist_ok=True)
        os.setxattr(parent, _OPAQUE_XATTR, b"y", follow_symlinks=False)
        return
    if base.startswith(WHITEOUT_PREFIX):
        hidden = os.path.join(parent, base[len(WHITEOUT_PREFIX):])
        _clear(hidden)
        os.makedirs(parent, exist_ok=True)
        os.mknod(hidden, stat.S_IFCHR | 0o000, os.makedev(0, 0))
        return
    if member.ischr() or member.isblk():
        return  # device nodes: left out (see the module's docstring)
    if member.islnk():
        source = _target(root, member.linkname)
        if not _inside(root, os.path.realpath(source)):
            raise LayerUnpackError(f"hard link {member.name!r} points outside the layer")
    _clear(path, keep_folder=member.isdir())
    tar.extract(member, root, set_attrs=True, numeric_owner=True, filter=_as_is)


def _clear(path: str, *, keep_folder: bool = False) -> None:
    """Remove what a later member replaces (a file by a folder, a link by a file); a
    folder stays when a folder comes again (its entry only sets its attributes)."""
    is_folder = os.path.isdir(path) and not os.path.islink(path)
    if is_folder and keep_folder:
        return
    if is_folder:
        remove_tree(Path(path))
    elif os.path.lexists(path):
        os.unlink(path)


def _as_is(member: tarfile.TarInfo, dest_path: str) -> tarfile.TarInfo:
    """Modes, owners and setuid bits as the image has them: the checks above are ours."""
    return member
