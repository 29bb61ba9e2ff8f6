"""One machinery probe per kind of pristine sandbox in a job: alike sandboxes share it,
any difference in what made the sandbox probes again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import write_task
from sandlot.sandbox.base import EnvironmentInfo, EnvironmentRequest, SandboxSpec
from sandlot.sandbox.local_backend import pristine_key

pytestmark = [pytest.mark.e2e]


def request(spec: SandboxSpec, digest: str = "env-digest") -> EnvironmentRequest:
    return EnvironmentRequest(spec=spec, environment_dir=Path("/nonexistent"), digest=digest,
                              build_timeout_sec=60, log_dir=Path("/nonexistent"))


def test_the_pristine_key_names_what_made_the_sandbox_and_nothing_else() -> None:
    host = EnvironmentInfo(base="host")
    spec = SandboxSpec(name="a__1", workdir="/app", layers=(Path("/cache/layers/k1"),))
    key = pristine_key(spec, request(spec), host)
    assert key is not None
    renamed = SandboxSpec(name="b__2", workdir="/app", layers=(Path("/cache/layers/k1"),),
                          memory_mb=512)
    assert pristine_key(renamed, request(renamed), host) == key
    for other, digest, info in [
            (SandboxSpec(name="a__1", workdir="/app", layers=(Path("/cache/layers/k2"),)),
             "env-digest", host),
            (spec, "other-digest", host),
            (spec, "env-digest", EnvironmentInfo(base="host-fallback", image="python:3.12")),
            (SandboxSpec(name="a__1", workdir="/app", layers=(Path("/cache/layers/k1"),),
                         env={"PYTHONPATH": "/opt"}), "env-digest", host),
            (SandboxSpec(name="a__1", workdir="/app", layers=(Path("/cache/layers/k1"),),
                         removed_paths=("/usr/lib/python3.11/EXTERNALLY-MANAGED",)),
             "env-digest", host)]:
        assert pristine_key(other, request(other, digest), info) not in (None, key)
    started = SandboxSpec(name="a__1", workdir="/app", entrypoint=("/start.sh",))
    assert pristine_key(started, request(started), host) is None


@pytest.mark.timeout(300)
def test_alike_sandboxes_share_a_probe_and_another_environment_is_probed(
        run_cli, tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    for name in ("alike-1", "alike-2"):
        write_task(tasks, name)
    write_task(tasks, "tools", dockerfile="FROM debian:bookworm-slim\nWORKDIR /app\n"
               "RUN mkdir -p /opt/tools\nENV PATH=/opt/tools:/usr/local/bin:/usr/bin:/bin\n")
    proc = run_cli("run", str(tasks), "--agent", "oracle", "-n", "1", "--image-policy", "host",
                   "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "probes")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = tmp_path / "jobs" / "probes"

    def probe_line(trial: str) -> str:
        [line] = [line for line in (job / trial / "trial.log").read_text().splitlines()
                  if "verifier machinery" in line]
        return line

    def machinery(trial: str) -> dict[str, object]:
        return json.loads((job / trial / "machinery.json").read_text())

    lines = {probe_line("alike-1__1"), probe_line("alike-2__1")}
    assert sum("as probed in an alike sandbox" in line for line in lines) == 1, lines
    assert machinery("alike-1__1") == machinery("alike-2__1")
    assert machinery("alike-1__1")["pythons"]
    assert "as probed in an alike sandbox" not in probe_line("tools__1")
    tools_dirs = [written for written, _ in machinery("tools__1")["path_dirs"]]  # type: ignore[union-attr]
    assert tools_dirs[0] == "/opt/tools"
