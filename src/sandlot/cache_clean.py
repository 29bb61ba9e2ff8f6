"""`sandlot clean`: empty sandlot's cache folder and the task images it built.

The cache holds what is worth keeping between runs: agents installed from npm, images
pulled for the local sandbox, layers built from task Dockerfiles, and the scratch folders
of running trials. Emptying it while
a run uses it would pull the floor from under that run, so a live owner is refused.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sandlot.hostguard import remove_tree
from sandlot.images.store import IMAGES_FOLDER
from sandlot.sandbox.local_backend import LocalBackend, folder_owner
from sandlot.trees import disk_usage

#: The pulled images of the local sandbox (sandlot.images.ImageStore), under the cache.


class CacheInUseError(Exception):
    """A sandlot process that is still running uses the cache."""


@dataclass
class CleanReport:
    cache_dir: Path
    removed_bytes: int = 0
    removed_entries: int = 0
    engine_items: int = 0
    left: tuple[str, ...] = ()


def live_users(cache_dir: Path) -> list[int]:
    """Pids of running processes (other than this one) whose folders are in the cache."""
    pids = {folder_owner(p.name) for p in LocalBackend(cache_dir).owned_folders()}
    return sorted(p for p in pids if p is not None and p != os.getpid()
                  and Path(f"/proc/{p}").exists())


async def clean_cache(cache_dir: Path, *, images: bool = True,
                      only_images: bool = False) -> CleanReport:
    """Remove everything in `cache_dir` and, with `images`, the engine's task images;
    without `images` the pulled images (IMAGES_FOLDER) stay too. `only_images`: remove
    the pulled images alone.

    Raises: CacheInUseError when a running sandlot uses the cache.
    """
    users = live_users(cache_dir)
    if users:
        raise CacheInUseError(
            f"sandlot process(es) {', '.join(map(str, users))} are using {cache_dir}; "
            "let them finish (or stop them) and run `sandlot clean` again")
    from sandlot.sandbox.cgroups import sweep_stale
    from sandlot.sandbox.docker_backend import sweep_docker_leftovers

    report = CleanReport(cache_dir=cache_dir)
    sweep_stale()
    left: list[str] = []
    if cache_dir.is_dir():
        for entry in sorted(cache_dir.iterdir()):
            keep = (entry.name != IMAGES_FOLDER) if only_images else (
                not images and entry.name == IMAGES_FOLDER)
            if keep:
                continue
            size = disk_usage(entry) if entry.is_dir() and not entry.is_symlink() else 0
            if remove_tree(entry, ignore_errors=True):
                report.removed_bytes += size
                report.removed_entries += 1
            else:
                left.append(str(entry))
    report.left = tuple(left)
    if not only_images:
        report.engine_items = await sweep_docker_leftovers(remove_images=images)
    return report
