"""A trial's llm_trajectory.jsonl: one line per model exchange, appended in one write.

The file is opened (append-only) at the trial's first exchange and held open while its
gateway session is, instead of being opened and closed for every exchange: at 64
concurrent streams that open and close cost a tenth of the gateway's CPU. A trial
without exchanges has no file, as before. A record that arrives after the session
closed (a request still in flight when its trial ended) is appended by opening the
file once.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC


class TrajectoryLog:
    """Append-only JSON lines; a crash loses at most the line being written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._closed = False

    def append(self, record: dict[str, Any]) -> None:
        line = (json.dumps(record, default=str, separators=(",", ":")) + "\n").encode()
        if not self._closed:
            if self._fd is None:
                self._fd = os.open(self.path, _FLAGS, 0o666)
            _write_all(self._fd, line)
            return
        fd = os.open(self.path, _FLAGS, 0o666)
        try:
            _write_all(fd, line)
        finally:
            os.close(fd)

    def close(self) -> None:
        self._closed = True
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
