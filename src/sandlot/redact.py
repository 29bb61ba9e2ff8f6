"""Redaction of secrets the user marks (`--redact-env NAME`): their values never stay in
anything a trial leaves under jobs/.

A trial's files are rewritten once, when it ends and before its result.json is written, so
trajectories, agent logs and test output that echoed a marked secret hold
`[REDACTED:NAME]` instead. The result itself is redacted as JSON text, so every field is.
"""

from __future__ import annotations

import os
from pathlib import Path

from sandlot.fsutil import write_atomic

#: Values shorter than this are not redacted: they would mangle unrelated text.
MIN_SECRET_CHARS = 6
ENV_LIST = "SANDLOT_REDACT_ENV"


def secrets_from_env(names: list[str], environ: dict[str, str] | None = None) -> dict[str, str]:
    """name -> value for the marked env vars that are set (and long enough to matter)."""
    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for name in names:
        value = env.get(name, "")
        if len(value) >= MIN_SECRET_CHARS:
            out[name] = value
    return out


def marked_names(cli_names: list[str] | None, environ: dict[str, str] | None = None) -> list[str]:
    """--redact-env names plus $SANDLOT_REDACT_ENV (comma-separated), in order, unique."""
    env = os.environ if environ is None else environ
    names = list(cli_names or []) + [n.strip() for n in env.get(ENV_LIST, "").split(",")]
    return list(dict.fromkeys(n for n in names if n))


def redact_text(text: str, secrets: dict[str, str]) -> str:
    for name, value in sorted(secrets.items(), key=lambda kv: -len(kv[1])):
        text = text.replace(value, f"[REDACTED:{name}]")
    return text


def redact_tree(folder: Path, secrets: dict[str, str], max_bytes: int = 512 * 1024 * 1024) -> int:
    """Rewrite every regular file under `folder` that holds a secret; returns how many."""
    if not secrets or not folder.is_dir():
        return 0
    needles = [(name, value.encode()) for name, value in
               sorted(secrets.items(), key=lambda kv: -len(kv[1]))]
    changed = 0
    for path in folder.rglob("*"):
        if path.is_symlink() or not path.is_file() or path.stat().st_size > max_bytes:
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        new = data
        for name, value in needles:
            new = new.replace(value, f"[REDACTED:{name}]".encode())
        if new != data:
            write_atomic(path, new)
            changed += 1
    return changed
