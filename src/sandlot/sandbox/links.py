"""Symlinks followed as the sandbox's kernel would, from outside it.

sandlot reads a sandbox's files from the host, where an absolute link inside the sandbox
would point at the host's own files. Every such walk resolves the links itself, against
the sandbox's tree, through this one loop.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable

#: Links followed resolving one path, as the kernel's own limit (ELOOP past it).
MAX_LINKS = 40


def resolve_link(path: str, readlink: Callable[[str], str | None], *,
                 follow_last: bool = True, stop: tuple[str, ...] = (),
                 max_links: int = MAX_LINKS) -> str | None:
    """Where `path` leads in the sandbox's tree (an absolute, normalised path).

    `readlink(p)` answers for a path whose folders are already resolved: the link's
    text, or None for anything else (missing included: the rest is taken as written).
    `follow_last=False` leaves the last component as it is (lstat's view). Resolution
    stops at the first `stop` folder it enters: nothing there is read. None when the
    links do not end (a loop, or more than `max_links`)."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    resolved: list[str] = []
    links = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        here = "/" + "/".join([*resolved, part])
        if any(here == s or here.startswith(s.rstrip("/") + "/") for s in stop):
            return posixpath.normpath("/".join([here, *parts]))
        target = readlink(here) if parts or follow_last else None
        if target is None:
            resolved.append(part)
            continue
        links += 1
        if links > max_links:
            return None
        if target.startswith("/"):
            resolved = []
        parts = [p for p in target.split("/") if p not in ("", ".")] + parts
    return "/" + "/".join(resolved)
