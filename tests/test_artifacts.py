"""Artifacts (task.toml `artifacts`): what a task lists is copied out of the agent's
sandbox into the trial folder after the agent's turn, within the trial's copy-out
budget, listed in result.json and artifacts/manifest.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import write_task
from sandlot.artifacts import ArtifactEntry, artifact_entries, excluded
from sandlot.tasks.config import ArtifactSection

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

TASK_TOML = """\
artifacts = [
  "/var/log/app",
  "out/report.json",
  { source = "/app/data", destination = "kept-data", exclude = ["*.tmp", "cache"] },
  { source = "/app/out/link.txt" },
  { source = "/app/big.bin" },
  { source = "/app/never-made.txt" },
]
[agent]
timeout_sec = 60
[verifier]
timeout_sec = 60
"""
SOLVE = """\
mkdir -p /var/log/app /app/out /app/data/cache /logs/artifacts
echo started > /var/log/app/a.log
echo '{"ok": true}' > /app/out/report.json
ln -s /etc/hostname /app/out/link.txt
echo keep > /app/data/keep.txt; echo skip > /app/data/skip.tmp; echo c > /app/data/cache/c.txt
ln -s /etc/shadow /app/data/shadow
echo published > /logs/artifacts/published.txt
head -c 3000000 /dev/zero > /app/big.bin
"""


def artifact_task(root: Path, name: str = "collect", **kwargs: object) -> Path:
    return write_task(root, name, task_toml=TASK_TOML, solve_sh=SOLVE, **kwargs)  # type: ignore[arg-type]


def check_collected(trial: Path) -> dict:
    result = json.loads((trial / "result.json").read_text())
    assert result["error"] is None, result["error"]
    art = trial / "artifacts"
    assert (art / "var/log/app/a.log").read_text() == "started\n"
    assert json.loads((art / "app/out/report.json").read_text()) == {"ok": True}
    assert (art / "logs/artifacts/published.txt").read_text() == "published\n"
    kept = art / "kept-data"
    assert (kept / "keep.txt").is_file()
    assert not (kept / "skip.tmp").exists() and not (kept / "cache").exists()
    assert "a symlink in the sandbox" in (kept / "shadow").read_text()  # a note, not followed
    by_source = {r["source"]: r for r in result["artifacts"]}
    assert by_source["/logs/artifacts"]["status"] == "ok"  # the convention folder
    assert by_source["/app/out/report.json"]["type"] == "file"
    assert by_source["/app/out/link.txt"]["status"] == "link"
    assert by_source["/app/big.bin"]["status"] == "cut"  # past --max-copy-out-mb 2
    assert not (art / "app/big.bin").exists()
    assert by_source["/app/never-made.txt"]["status"] == "missing"
    manifest = json.loads((art / "manifest.json").read_text())
    assert manifest == result["artifacts"]
    return result


def test_listed_artifacts_are_collected_within_the_budget(run_cli, tmp_path):
    artifact_task(tmp_path / "tasks")
    proc = run_cli("run", str(tmp_path / "tasks"), "--agent", "oracle", "--jobs-dir",
                   str(tmp_path / "jobs"), "--job-name", "a", "--max-copy-out-mb", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = check_collected(tmp_path / "jobs" / "a" / "collect__1")
    assert any("artifact" in cap for cap in result["integrity"]["caps_hit"])


def test_each_step_collects_its_own_and_the_tasks_artifacts(run_cli, tmp_path):
    task = write_task(tmp_path / "tasks", "stepped", task_toml=(
        'artifacts = ["/app/shared.txt"]\n[agent]\ntimeout_sec = 60\n'
        '[[steps]]\nname = "one"\nartifacts = ["/app/one.txt"]\n'
        '[[steps]]\nname = "two"\n'), files={
            "steps/one/instruction.md": "One.\n", "steps/two/instruction.md": "Two.\n"},
        solve_sh="echo $RANDOM > /app/shared.txt; touch /app/one.txt\n")
    (task / "instruction.md").unlink()
    proc = run_cli("run", str(tmp_path / "tasks"), "--agent", "oracle", "--jobs-dir",
                   str(tmp_path / "jobs"), "--job-name", "s")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trial = tmp_path / "jobs" / "s" / "stepped__1"
    result = json.loads((trial / "result.json").read_text())
    one, two = result["steps"]
    assert {a["source"] for a in one["artifacts"]} == {"/app/shared.txt", "/app/one.txt"}
    assert {a["source"] for a in two["artifacts"]} == {"/app/shared.txt"}
    assert (trial / "steps/one/artifacts/app/one.txt").is_file()
    assert not (trial / "steps/two/artifacts/app/one.txt").exists()
    assert (trial / "steps/two/artifacts/app/shared.txt").is_file()


def test_a_separate_verifier_gets_the_collected_artifacts_at_their_paths(run_cli, tmp_path):
    write_task(tmp_path / "tasks", "sep", task_toml=(
        'artifacts = ["/var/log/app/run.log"]\n[agent]\ntimeout_sec = 60\n'
        '[verifier]\ntimeout_sec = 60\nenvironment_mode = "separate"\n'),
        solve_sh="mkdir -p /var/log/app; echo ran > /var/log/app/run.log\n",
        test_sh='[ "$(cat /var/log/app/run.log)" = ran ] && echo 1 > /logs/verifier/reward.txt'
                ' || echo 0 > /logs/verifier/reward.txt\n')
    proc = run_cli("run", str(tmp_path / "tasks"), "--agent", "oracle", "--jobs-dir",
                   str(tmp_path / "jobs"), "--job-name", "v")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((tmp_path / "jobs" / "v" / "sep__1" / "result.json").read_text())
    assert result["verifier_mode"] == "separate" and result["reward"] == 1.0, result["error"]


@pytest.mark.parametrize(("entry", "needle"), [
    ('{ source = "/app/x", destination = "/abs" }', "relative"),
    ('{ source = "/app/x", destination = "../up" }', ".."),
    ('{ source = "/app/x", destination = "manifest.json" }', "manifest.json"),
    ('{ source = "/app/../etc/x" }', ".."),
    ('{ source = "/data/x", service = "db" }', "service"),
])
def test_a_bad_artifact_entry_is_refused_with_the_reason(make_task, entry, needle):
    from sandlot.tasks import check_task

    task = make_task("bad", task_toml=f"artifacts = [{entry}]\n")
    problems = [p for p in check_task(task) if p.severity == "error"]
    assert len(problems) == 1 and needle in problems[0].message + problems[0].fix, problems
    assert problems[0].field is not None and problems[0].field.startswith("artifacts")


def test_entries_resolve_relative_sources_and_keep_the_convention_folder_first():
    listed = ["out/a.txt", ArtifactSection(source="/logs/artifacts/", exclude=["*.tmp"])]
    entries = artifact_entries(listed, "/app")
    assert entries == [ArtifactEntry("/app/out/a.txt"),
                       ArtifactEntry("/logs/artifacts", exclude=("*.tmp",))]
    assert artifact_entries([], "/app") == [ArtifactEntry("/logs/artifacts", implicit=True)]
    assert str(ArtifactEntry("/var/log/x").relative) == "var/log/x"
    assert str(ArtifactEntry("/x", destination="a/../b").relative) == "a/b"


def test_exclusions_match_as_tar_does():
    assert excluded("/a/b/c.tmp", ["*.tmp"]) and excluded("/cache", ["cache"])
    assert excluded("/a/cache/x", ["cache/*"]) and not excluded("/a/cached", ["cache"])
    assert not excluded("/a/b.txt", ["*.tmp", "cache"])
