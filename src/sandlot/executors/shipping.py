"""Folders as bytes between machines: a task folder to a node, a trial folder back.

A cluster node has no view of the driver's disk and the driver is the only writer of the
job folder, so both directions travel as tar archives in memory. Packing keeps regular
files, folders and symlinks as they are (a task's own symlinks are part of it) and caps
the total: what a trial leaves is bounded, but a cap makes a runaway log a note instead
of a driver that runs out of memory. Unpacking uses tarfile's `data` filter: no absolute
paths, no `..`, no links out of the destination, no device files, no setuid bits.
"""

from __future__ import annotations

import io
import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

#: The file a packed folder lists what the cap left out in.
OMITTED_NOTE = "omitted-by-sandlot.txt"


@dataclass(frozen=True)
class Packed:
    data: bytes
    #: Paths (relative to the folder) left out to keep the archive under its cap.
    omitted: tuple[str, ...] = field(default_factory=tuple)


def pack_tree(root: Path, *, max_bytes: int, exclude: frozenset[str] = frozenset()) -> Packed:
    """`root` as a gzip'd tar. Files whose bytes would pass `max_bytes` in all are left
    out (the smaller ones still go), and named in OMITTED_NOTE; `exclude` names top-level
    entries never packed."""
    buffer = io.BytesIO()
    omitted: list[str] = []
    total = 0
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as tar:
        for dirpath, dirnames, filenames in os.walk(root):
            here = Path(dirpath)
            rel_dir = here.relative_to(root)
            if rel_dir == Path("."):
                dirnames[:] = [d for d in dirnames if d not in exclude]
                filenames = [f for f in filenames if f not in exclude]
            dirnames.sort()
            for name in dirnames:
                path = here / name
                if path.is_symlink():  # os.walk lists a link to a folder among folders
                    tar.add(path, arcname=str(rel_dir / name), recursive=False)
            if rel_dir != Path("."):
                tar.add(here, arcname=str(rel_dir), recursive=False)
            for name in sorted(filenames):
                path, arcname = here / name, str(rel_dir / name)
                try:
                    size = path.lstat().st_size if not path.is_symlink() else 0
                except OSError:
                    continue
                if total + size > max_bytes:
                    omitted.append(arcname)
                    continue
                total += size
                tar.add(path, arcname=arcname, recursive=False)
        if omitted:
            note = ("These files were left out of the copy from the node, to keep it under "
                    f"{max_bytes:,} bytes:\n" + "".join(f"{name}\n" for name in omitted))
            info = tarfile.TarInfo(OMITTED_NOTE)
            info.size = len(note.encode())
            tar.addfile(info, io.BytesIO(note.encode()))
    return Packed(buffer.getvalue(), tuple(omitted))


def unpack_tree(data: bytes, dest: Path) -> None:
    """Extract an archive of pack_tree into `dest` (made if missing), as plain data."""
    if not hasattr(tarfile, "data_filter"):  # Python 3.11.0-3.11.3
        raise RuntimeError("unpacking a node's files safely needs Python 3.11.4 or later "
                           "(tarfile's data filter)")
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(dest, filter="data")
