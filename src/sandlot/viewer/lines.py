"""Random access to the lines of append-only JSONL files, without reading them whole.

A `LineIndex` remembers where each complete line starts. It is built by one streaming
pass (one line in memory at a time) and extended as the file grows, so a page of a
100 MB trajectory is a seek and a few reads, and a running trial's new lines are picked
up by reading only the bytes added since the last look. A line without its final newline
(still being written) is not counted until it is complete.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: tag(line_head) -> a small int stored per line (e.g. 1 for "an assistant entry").
Tagger = Callable[[bytes], int]
TAG_HEAD_BYTES = 160


@dataclass
class _Entry:
    inode: int
    scanned_to: int = 0
    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    tags: list[int] = field(default_factory=list)
    #: prefix[i] = number of lines before line i whose tag is non-zero.
    prefix: list[int] = field(default_factory=lambda: [0])


class LineIndex:
    """Line offsets of one file, kept up to date on each call to `refresh`."""

    def __init__(self, path: Path, tagger: Tagger | None = None) -> None:
        self.path = path
        self.tagger = tagger
        self._entry: _Entry | None = None
        self._lock = threading.Lock()

    def refresh(self) -> int:
        """Scan what was appended since the last call; return the number of lines."""
        with self._lock:
            try:
                st = os.stat(self.path)
            except FileNotFoundError:
                self._entry = None
                return 0
            entry = self._entry
            if entry is None or entry.inode != st.st_ino or st.st_size < entry.scanned_to:
                entry = self._entry = _Entry(inode=st.st_ino)
            if st.st_size > entry.scanned_to:
                self._scan(entry)
            return len(entry.starts)

    def _scan(self, entry: _Entry) -> None:
        with open(self.path, "rb") as fh:
            fh.seek(entry.scanned_to)
            pos = entry.scanned_to
            for line in fh:
                if not line.endswith(b"\n"):
                    break  # a line still being written
                if line.strip():
                    entry.starts.append(pos)
                    entry.ends.append(pos + len(line))
                    tag = self.tagger(line[:TAG_HEAD_BYTES]) if self.tagger else 0
                    entry.tags.append(tag)
                    entry.prefix.append(entry.prefix[-1] + (1 if tag else 0))
                pos += len(line)
            entry.scanned_to = pos

    def __len__(self) -> int:
        return len(self._entry.starts) if self._entry else 0

    def tag(self, i: int) -> int:
        assert self._entry is not None
        return self._entry.tags[i]

    def tagged_before(self, i: int) -> int:
        """How many lines before line `i` carry a non-zero tag."""
        assert self._entry is not None
        return self._entry.prefix[i]

    def read(self, start: int, stop: int) -> list[bytes]:
        """The raw lines start..stop-1 (clamped to the lines indexed so far)."""
        entry = self._entry
        if entry is None:
            return []
        stop = min(stop, len(entry.starts))
        out: list[bytes] = []
        if start >= stop:
            return out
        with open(self.path, "rb") as fh:
            for i in range(max(0, start), stop):
                fh.seek(entry.starts[i])
                out.append(fh.read(entry.ends[i] - entry.starts[i]))
        return out

    def size_of(self, i: int) -> int:
        assert self._entry is not None
        return self._entry.ends[i] - self._entry.starts[i]


class IndexCache:
    """One `LineIndex` per path, shared by every request (bounded, least recently used)."""

    def __init__(self, max_files: int = 256) -> None:
        self._items: OrderedDict[tuple[Path, bool], LineIndex] = OrderedDict()
        self._lock = threading.Lock()
        self.max_files = max_files

    def get(self, path: Path, tagger: Tagger | None = None) -> LineIndex:
        key = (path, tagger is not None)
        with self._lock:
            index = self._items.get(key)
            if index is None:
                index = self._items[key] = LineIndex(path, tagger)
            self._items.move_to_end(key)
            while len(self._items) > self.max_files:
                self._items.popitem(last=False)
        index.refresh()
        return index


class LRU:
    """A small thread-safe least-recently-used cache of computed values."""

    def __init__(self, max_items: int) -> None:
        self._items: OrderedDict[Any, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.max_items = max_items

    def get(self, key: Any) -> Any:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        return None

    def put(self, key: Any, value: Any) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.max_items:
                self._items.popitem(last=False)


def parse_line(raw: bytes) -> dict[str, Any] | None:
    """One JSONL record, or None if the line is not a JSON object."""
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
