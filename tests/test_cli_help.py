"""`--help` is answered from the commands' definitions: every command's help, without
importing pydantic, rich or the job machinery (benchmarks/cli_start.py times it)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import REPO

pytestmark = pytest.mark.timeout(120)


def _sandlot(*args: str, importtime: bool = False) -> subprocess.CompletedProcess[str]:
    flags = ["-X", "importtime"] if importtime else []
    return subprocess.run([sys.executable, *flags, "-m", "sandlot.cli", *args],
                          capture_output=True, text=True, timeout=60, cwd=REPO,
                          env={**os.environ, "COLUMNS": "100"})


@pytest.mark.parametrize("args", [(), ("run",), ("tasks", "check"), ("datasets", "show"),
                                  ("compare",)])
def test_help_imports_no_pydantic_rich_or_job_machinery(args):
    proc = _sandlot(*args, "--help", importtime=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines()
                if line.startswith("import time:")}
    for heavy in ("pydantic", "rich", "sandlot.models", "sandlot.job", "litellm", "aiohttp",
                  "asyncio"):
        assert heavy not in imported, f"`sandlot {' '.join(args)} --help` imports {heavy}"
    assert proc.stdout.startswith(f"Usage: sandlot {' '.join(args)}".rstrip() + " ")


def test_run_help_lists_every_flag_with_readable_value_names():
    text = _sandlot("run", "--help").stdout
    for flag in ("--agent TEXT", "--config PATH", "--n-concurrent INT", "--temperature NUMBER",
                 "--max-trial-tokens INT", "--model-kwarg TEXT", "--dataset TEXT"):
        assert flag in text, flag
    assert "<list[Path]>" not in text.split("Options:")[1]
    assert "6: the job's budget was spent" in " ".join(text.split())


def test_help_of_an_unknown_command_is_the_usual_error():
    proc = _sandlot("nosuch", "--help")
    assert proc.returncode == 2
    assert "error: No such command 'nosuch'" in proc.stderr


def test_help_after_a_double_dash_is_not_a_help_request(tmp_path):
    proc = _sandlot("tasks", "check", "--", "--help")
    assert proc.returncode == 2 and "--help is not a folder" in proc.stdout + proc.stderr
