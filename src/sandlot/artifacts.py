"""The files a task lists in `artifacts` (Harbor 0.26), kept in the trial folder.

After the agent's turn and before the tests, each listed path is copied out of the
agent's sandbox into `artifacts/` of the trial folder (a step's into
`steps/<name>/artifacts/`): at its destination if the entry names one, else at its own
path (`/var/log/app.log` -> `artifacts/var/log/app.log`). `/logs/artifacts`, Harbor's
folder for what an agent publishes, is collected too when it exists. The copy is plain
data within the trial's copy-out budget (links become notes, no setuid bits, nothing
past the cap), so a listed path can neither point the copy at the host nor fill its
disk. `artifacts/manifest.json` and result.json list what each entry gave.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import os
import stat
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from sandlot.errors import SandboxError
from sandlot.fsutil import write_atomic
from sandlot.hostguard import remove_tree
from sandlot.sandbox.base import Sandbox
from sandlot.sandbox.bounded_fs import export_tree, read_regular
from sandlot.tasks.config import ArtifactSection

#: Where Harbor's agents publish files; collected whenever it exists.
CONVENTION_SOURCE = "/logs/artifacts"
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class ArtifactEntry:
    """One path to collect: `source` inside the sandbox (absolute), `destination`
    relative to the artifacts folder (None: the source's own path)."""

    source: str
    destination: str | None = None
    exclude: tuple[str, ...] = ()
    #: The convention folder, collected though no entry names it.
    implicit: bool = False

    @property
    def relative(self) -> PurePosixPath:
        """Where it lands below the artifacts folder (never outside it)."""
        text = self.destination or self.source
        parts = [p for p in PurePosixPath(text).parts if p not in ("/", "", "..", ".")]
        return PurePosixPath(*parts) if parts else PurePosixPath("root")


def artifact_entries(listed: Sequence[str | ArtifactSection], workdir: str
                     ) -> list[ArtifactEntry]:
    """The entries of `listed` (a relative source is inside the working folder), the
    convention folder first unless an entry names it."""
    out = []
    for item in listed:
        section = ArtifactSection(source=item) if isinstance(item, str) else item
        source = section.source
        if not source.startswith("/"):
            source = f"{workdir.rstrip('/')}/{source}"
        out.append(ArtifactEntry(source=source.rstrip("/") or "/",
                                 destination=section.destination or None,
                                 exclude=tuple(section.exclude)))
    if not any(e.source == CONVENTION_SOURCE and e.destination is None for e in out):
        out.insert(0, ArtifactEntry(CONVENTION_SOURCE, implicit=True))
    return out


def excluded(path: str, patterns: Sequence[str]) -> bool:
    """tar --exclude's matching: a pattern matches the path or any tail of it
    (`*.log` any log file, `cache` any folder named cache and what is in it)."""
    parts = [p for p in path.split("/") if p]
    tails = ["/".join(parts[i:]) for i in range(len(parts))]
    return any(fnmatch.fnmatchcase(tail, pattern) for pattern in patterns for tail in tails)


def _overlaps(a: PurePosixPath, b: PurePosixPath) -> bool:
    return a == b or a in b.parents or b in a.parents


@dataclass
class _Collected:
    status: str
    kind: str | None = None
    bytes: int = 0
    left_out: int = 0
    note: str | None = None


async def collect_artifacts(sandbox: Sandbox, entries: Sequence[ArtifactEntry],
                            dest: Path, max_bytes: int) -> tuple[list[dict[str, object]], int]:
    """Copy each entry out of `sandbox` into `dest` (the artifacts folder), within
    `max_bytes` in all. Returns the manifest (one record per entry) and the bytes
    copied; writes `dest/manifest.json` when anything was listed."""
    records: list[dict[str, object]] = []
    claimed: list[PurePosixPath] = []
    used = 0
    for entry in entries:
        rel = entry.relative
        if any(_overlaps(rel, other) for other in claimed):
            found = _Collected("skipped", note="its destination overlaps an earlier entry's")
        else:
            found = await _collect_one(sandbox, entry, dest / rel, max_bytes - used)
            if found.status != "missing":
                claimed.append(rel)
        used += found.bytes
        if entry.implicit and found.status == "missing":
            continue  # the convention folder, not made: nothing to say
        records.append({"source": entry.source, "destination": f"artifacts/{rel}",
                        "type": found.kind, "status": found.status, "bytes": found.bytes,
                        "left_out": found.left_out, "note": found.note,
                        "exclude": list(entry.exclude)})
    if records:
        dest.mkdir(parents=True, exist_ok=True)
        write_atomic(dest / MANIFEST, json.dumps(records, indent=1) + "\n")
    return records, used


async def _collect_one(sandbox: Sandbox, entry: ArtifactEntry, target: Path,
                       budget: int) -> _Collected:
    host_path = getattr(sandbox, "host_path", None)
    if host_path is None:  # no host view: an engine on another machine
        return await _download_one(sandbox, entry, target, budget)
    try:
        root = Path(host_path("/"))
        src = Path(host_path(entry.source))
    except SandboxError as exc:
        return _Collected("failed", note=str(exc))
    return await asyncio.to_thread(_export, root, src, entry, target, budget)


def _export(root: Path, src: Path, entry: ArtifactEntry, target: Path,
            budget: int) -> _Collected:
    """From a host view of the sandbox: links on the way were resolved inside its root
    (host_path); the last component is never followed."""
    try:
        st = os.lstat(src)
    except FileNotFoundError:
        return _Collected("missing", note="not found in the sandbox")
    except OSError as exc:
        return _Collected("failed", note=exc.strerror or str(exc))
    if stat.S_ISLNK(st.st_mode):
        return _Collected("link", note=f"a link (to {os.readlink(src)}): not followed")
    if stat.S_ISDIR(st.st_mode):
        report = export_tree(src, target, max(0, budget),
                             exclude=(lambda p: excluded(p, entry.exclude))
                             if entry.exclude else None)
        note = "; ".join(report.notes[:3]) or None
        status = "ok" if report.files else "empty"
        return _Collected(status if not report.left_out else "cut", "directory",
                          report.bytes, report.left_out, note)
    if not stat.S_ISREG(st.st_mode):
        return _Collected("failed", "other", note="not a regular file or folder")
    if st.st_size > budget:
        return _Collected("cut", "file", left_out=1,
                          note=f"{st.st_size} bytes, past what the trial may still copy "
                               f"({max(0, budget)})")
    relative = src.relative_to(root).as_posix()
    data = read_regular(root, relative, max(0, budget))
    if data is None:
        return _Collected("failed", "file", note="it changed while it was copied")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return _Collected("ok", "file", len(data))


async def _download_one(sandbox: Sandbox, entry: ArtifactEntry, target: Path,
                        budget: int) -> _Collected:
    """A sandbox with no host view (an engine on another machine): its download, into
    a staging folder, then the same bounded copy."""
    staging = Path(tempfile.mkdtemp(prefix="sandlot-artifact-"))
    try:
        try:
            await sandbox.download(entry.source, staging / "x")
        except (SandboxError, OSError) as exc:
            return _Collected("missing", note=str(exc))
        return await asyncio.to_thread(_export, staging, staging / "x", entry, target,
                                       budget)
    finally:
        remove_tree(staging, ignore_errors=True)


def collected_uploads(records: Sequence[dict[str, object]], out: Path, workdir: str
                      ) -> list[tuple[Path, str]]:
    """(copy in the trial folder, path in the sandbox) of each collected artifact a
    separate verifier does not get otherwise (it carries the working folder and
    /logs/artifacts): Harbor puts them back at their sources for the tests. The copies
    are plain data already (no links, no setuid bits)."""
    carried = (workdir.rstrip("/"), CONVENTION_SOURCE)
    out_list = []
    for record in records:
        source = str(record["source"])
        if record["status"] not in ("ok", "cut", "empty"):
            continue
        if any(source == c or source.startswith(f"{c}/") for c in carried):
            continue
        copy = out / str(record["destination"])
        if copy.exists():
            out_list.append((copy, source))
    return out_list
