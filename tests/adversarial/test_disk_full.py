"""The disk fills up while sandlot writes results: a clear error, no half-written file.

The jobs folder is a tiny tmpfs mounted in a private mount namespace (`unshare --mount
--propagation private`): only the sandlot process under test sees it, the host's mounts are
never touched. Before the namespace goes away, the folder is copied out for inspection.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import sandlot_cmd

from .support import SHELL_AGENT, cli_env, needs_root_sandbox, write_task

pytestmark = [pytest.mark.e2e, pytest.mark.adversarial, needs_root_sandbox,
              pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare")]

#: Runs inside the private mount namespace: mount, run sandlot, keep a copy of the result.
IN_NAMESPACE = r"""
size=$1; jobs=$2; out=$3; shift 3
mkdir -p "$jobs" "$out" || exit 90
mount -t tmpfs -o "size=$size" sandlot-adv-tmpfs "$jobs" || exit 91
"$@" > "$out/stdout.txt" 2> "$out/stderr.txt"
echo $? > "$out/rc"
cp -a "$jobs/." "$out/jobs"
"""
#: Where each size runs out: before the first summary, or in the middle of the trials.
SIZES = {"4k": "the first summary.json", "16k": "a trial's result.json"}


@pytest.fixture(scope="module")
def full_runs(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("disk-full")
    for name in ("a", "b"):
        write_task(root / "tasks", name, instruction="echo some work; echo done > /app/done")
    runs = {}
    for size in SIZES:
        jobs, out = root / f"jobs-{size}", root / f"out-{size}"
        cmd = sandlot_cmd("run", str(root / "tasks"), "--agent", SHELL_AGENT, "-k", "3",
                          "--jobs-dir", str(jobs), "--job-name", "full")
        proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                               IN_NAMESPACE, "sh", size, str(jobs), str(out), *cmd],
                              env=cli_env(cache_dir), capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr  # the wrapper itself
        # The tmpfs lived in the namespace only: on the host the folder is still empty.
        assert not list(jobs.iterdir())
        assert "sandlot-adv-tmpfs" not in Path("/proc/self/mountinfo").read_text()
        runs[size] = {"rc": int((out / "rc").read_text()), "jobs": out / "jobs",
                      "output": (out / "stdout.txt").read_text()
                      + (out / "stderr.txt").read_text()}
    return runs


@pytest.mark.parametrize("size", list(SIZES))
def test_a_full_disk_leaves_no_half_written_file(full_runs, size, record):
    run = full_runs[size]
    record.fault(f"jobs folder full at {SIZES[size]}")
    jsons = list(run["jobs"].rglob("*.json"))
    assert jsons, "the run wrote nothing at all"
    for path in jsons:
        json.loads(path.read_text())
    leftovers = [p for p in run["jobs"].rglob(".*.tmp")]
    assert not leftovers, leftovers
    # What was written last and whole is there: config.json names the job.
    assert json.loads((run["jobs"] / "full" / "config.json").read_text())["job_name"] == "full"


@pytest.mark.parametrize("size", list(SIZES))
def test_a_full_disk_is_a_clear_error(full_runs, size, record):
    run = full_runs[size]
    clear = ("Traceback" not in run["output"] and "No space left on device" in run["output"]
             and run["rc"] != 0)
    record.attempt(f"crash sandlot with a full jobs folder ({SIZES[size]})", clear)
    assert clear, run["output"][-2000:]
