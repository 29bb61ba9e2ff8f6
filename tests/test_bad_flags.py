"""Every bad flag is one `error:` line that names it, with the usage exit code (2)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.timeout(120)

CASES = {
    "zero concurrency": (["-n", "0"], "--n-concurrent"),
    "not a number": (["-k", "two"], "--n-attempts"),
    "out of range": (["--max-error-rate", "2"], "--max-error-rate"),
    "unknown option": (["--concurrency", "4"], "--concurrency"),
    "unknown agent": (["--agent", "no-such-agent"], "no-such-agent"),
    "unknown backend": (["--sandbox", "kubernetes"], "--sandbox"),
    "unknown image policy": (["--image-policy", "sometimes"], "--image-policy"),
    "unknown verifier mode": (["--verifier-mode", "elsewhere"], "--verifier-mode"),
    "agent network": (["--agent-network", "lan"], "--agent-network"),
    "missing scripts dir": (["--agent", "builtin", "--model", "scripted/solver",
                             "--scripts-dir", "/no/such/scripts"], "--scripts-dir"),
    "api base without a model": (["--api-base", "http://127.0.0.1:9/v1"], "--api-base"),
    "max turns without a model": (["--max-turns", "3"], "--max-turns"),
    "template without repairs": (["--repair-template", "README.md"], "--repair-template"),
    "model without a provider": (["--agent", "builtin", "--model", "gpt-4.1"], "gpt-4.1"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_flag_is_one_line_naming_it(run_cli, make_task, tmp_path, case):
    args, flag = CASES[case]
    task = make_task("t")
    if "--agent" not in args:
        args = ["--agent", "oracle", *args]
    proc = run_cli("run", str(task.parent), *args, "--jobs-dir", str(tmp_path / "jobs"),
                   env={"COLUMNS": ""})
    out = proc.stdout + proc.stderr
    lines = [line for line in out.splitlines() if line.strip()]
    assert proc.returncode == 2, out
    assert len(lines) == 1, out
    assert lines[0].startswith("error:") and flag in lines[0], out
    assert "╭" not in out and "Traceback" not in out
    assert not (tmp_path / "jobs").exists()  # nothing written


def test_a_missing_argument_is_one_line(run_cli):
    proc = run_cli("run", "--agent", "oracle")
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, lines
    assert "give a task folder" in lines[0] and "-d NAME[@VERSION]" in lines[0], lines


def test_the_installed_command_reports_the_same_way(tmp_path):
    """The `sandlot` script pip installs (pyproject's entry point), not only `python -m`."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(sys.executable).with_name("sandlot")
    if not script.exists():
        pytest.skip("sandlot is not installed next to this Python")
    proc = subprocess.run([str(script), "run", str(tmp_path), "--agent", "oracle", "-n", "0"],
                          capture_output=True, text=True, timeout=60)
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, lines
    assert lines[0].startswith("error:") and "--n-concurrent" in lines[0], lines
