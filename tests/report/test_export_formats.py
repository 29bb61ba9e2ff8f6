"""`sandlot export`: ATIF trajectories that validate against ATIF's fields, one row per
trial as jsonl/csv, and the Markdown summary, on synthetic job folders."""

from __future__ import annotations

import csv
import io
import json
import time
from pathlib import Path

import pytest

from sandlot.report.export import ROW_COLUMNS, atif_trajectory, export_atif, export_text
from sandlot.viewer.jobs import read_result
from viewer.viewer_support import (
    AtifTrajectory,
    run_report,
    write_builtin_trial,
    write_config,
    write_result,
)


def messages_log(trial: Path) -> None:
    """Two Anthropic Messages exchanges: a tool call, then the answer after its result."""
    first = {"seq": 1, "format": "messages", "model": "anthropic/claude", "status": 200,
             "started_at": time.time(), "latency_sec": 0.4,
             "request": {"system": [{"type": "text", "text": "Be careful."}],
                         "messages": [{"role": "user", "content": "List /app."}]},
             "response": {"content": [
                 {"type": "thinking", "thinking": "use ls"},
                 {"type": "tool_use", "id": "tu_1", "name": "bash", "input": {"cmd": "ls"}},
                 {"type": "tool_use", "id": "tu_2", "name": "bash", "input": {"cmd": "pwd"}}]},
             "usage": {"input_tokens": 500, "output_tokens": 20, "cache_read_tokens": 0,
                       "cache_write_tokens": 100, "reasoning_tokens": 0, "total_tokens": 520},
             "cost_usd": 0.003}
    second = {**first, "seq": 2,
              "request": {"messages": [
                  {"role": "user", "content": "List /app."},
                  {"role": "assistant", "content": first["response"]["content"]},
                  {"role": "user", "content": [
                      {"type": "tool_result", "tool_use_id": "tu_1", "content": "a.py"},
                      {"type": "tool_result", "tool_use_id": "tu_2", "content": "/app"}]}]},
              "response": {"content": [{"type": "text", "text": "It holds a.py."}]},
              "usage": {"input_tokens": 600, "output_tokens": 8, "cache_read_tokens": 500,
                        "cache_write_tokens": 0, "reasoning_tokens": 0, "total_tokens": 608},
              "cost_usd": 0.001}
    path = trial / "trajectory" / "llm_trajectory.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(first) + "\n" + json.dumps(second) + "\n")


@pytest.fixture
def job(tmp_path: Path) -> Path:
    path = tmp_path / "jobs" / "mix"
    write_config(path, ["built", "claude", "oracle", "broken"])
    write_builtin_trial(path / "built__1", 2)
    write_result(path, "built", reward=1.0, tokens=1000)
    messages_log(path / "claude__1")
    write_result(path, "claude", reward=0.0, tokens=1128, cost=0.004)
    write_result(path, "oracle", reward=1.0, cost=None, agent="oracle")
    write_result(path, "broken", reward=None, error={
        "kind": "verifier_timeout", "message": "test.sh ran past 60s", "phase": "verify"})
    return path


def test_every_trial_exports_as_a_valid_atif_trajectory(job: Path, tmp_path: Path) -> None:
    paths = export_atif(job, tmp_path / "atif")
    assert sorted(p.name for p in paths) == ["broken__1.json", "built__1.json",
                                            "claude__1.json", "oracle__1.json"]
    for p in paths:
        data = json.loads(p.read_text())
        AtifTrajectory.model_validate(data)
        assert data["schema_version"] == "ATIF-v1.4"
        assert data["final_metrics"]["total_steps"] == len(data["steps"])


def test_builtin_trial_atif_steps_calls_observations_and_metrics(job: Path) -> None:
    result = read_result(job / "built__1" / "result.json")
    assert result is not None
    data = atif_trajectory(job, result)
    steps = data["steps"]
    assert [s["source"] for s in steps] == ["system", "user", "agent", "agent", "agent"]
    assert steps[1]["message"] == "Fix the bug in /app/x.py."
    call = steps[2]["tool_calls"][0]
    assert call == {"tool_call_id": "call_1", "function_name": "write_file",
                    "arguments": {"path": "/app/x.py", "content": "print(1)\n"}}
    assert steps[2]["observation"]["results"] == [
        {"content": "exit code 0\n1 " + "x" * 200, "source_call_id": "call_1"}]
    assert steps[2]["reasoning_content"] == "thinking 1"
    assert steps[2]["metrics"]["prompt_tokens"] == 100 and steps[2]["metrics"]["cost_usd"]
    assert steps[2]["extra"]["tool_results"][0]["duration_sec"] == 0.01
    assert steps[-1]["message"] == "All done." and "tool_calls" not in steps[-1]
    fm = data["final_metrics"]
    assert fm["total_prompt_tokens"] == result.usage["input_tokens"]  # type: ignore[index]
    assert data["agent"] == {"name": "builtin", "version": "unknown",
                             "model_name": "scripted/x"}
    assert data["extra"]["sandlot"]["passed"] is True


def test_messages_trial_results_attach_to_their_calls(job: Path) -> None:
    result = read_result(job / "claude__1" / "result.json")
    data = atif_trajectory(job, result)  # type: ignore[arg-type]
    AtifTrajectory.model_validate(data)
    sources = [s["source"] for s in data["steps"]]
    assert sources == ["system", "user", "agent", "agent"]
    calls = data["steps"][2]
    assert [c["tool_call_id"] for c in calls["tool_calls"]] == ["tu_1", "tu_2"]
    assert calls["observation"]["results"] == [
        {"content": "a.py", "source_call_id": "tu_1"},
        {"content": "/app", "source_call_id": "tu_2"}]
    assert calls["metrics"]["extra"]["cache_write_tokens"] == 100
    assert data["steps"][3]["metrics"]["cached_tokens"] == 500


def test_an_agent_without_model_calls_still_exports_one_step(job: Path) -> None:
    result = read_result(job / "oracle__1" / "result.json")
    data = atif_trajectory(job, result)  # type: ignore[arg-type]
    AtifTrajectory.model_validate(data)
    assert len(data["steps"]) == 1 and data["steps"][0]["source"] == "agent"
    assert "total_cost_usd" not in data["final_metrics"]  # unknown, not zero


def test_jsonl_and_csv_have_one_row_per_trial(job: Path) -> None:
    rows = [json.loads(line) for line in export_text(job, "jsonl").splitlines()]
    assert [r["trial"] for r in rows] == ["broken__1", "built__1", "claude__1", "oracle__1"]
    broken = rows[0]
    assert broken["scored"] is False and broken["error_kind"] == "verifier_timeout"
    assert rows[2]["cost_usd"] == 0.004 and rows[2]["rewards"] == {"reward": 0.0}
    table = list(csv.DictReader(io.StringIO(export_text(job, "csv"))))
    assert len(table) == 4 and list(table[0]) == list(ROW_COLUMNS)
    assert table[1]["passed"] == "True" and table[0]["reward"] == ""


def test_markdown_summary_has_the_interval_tasks_and_errors(job: Path) -> None:
    md = export_text(job, "markdown")
    # 2 passed of 3 scored (the timeout is errored): Wilson 95% [20.8%, 93.9%]
    assert "| pass rate (errors excluded) [95% Wilson CI] | 66.7% [20.8%, 93.9%] |" in md
    assert "| broken | 0 | 0 | 1 | — | verifier_timeout |" in md
    assert "| verifier_timeout | 1 |" in md


def test_export_command_writes_files_and_refuses_bad_input(job: Path, tmp_path: Path) -> None:
    out = run_report("export", str(job), "--format", "csv")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].startswith("job,trial,task")
    atif = run_report("export", str(job), "-f", "atif", "-o", str(tmp_path / "a"))
    assert atif.returncode == 0, atif.stderr
    assert len(list((tmp_path / "a").glob("*.json"))) == 4
    md = run_report("export", "mix", "--jobs-dir", str(job.parent), "-f", "markdown",
                    "-o", str(tmp_path / "r.md"))
    assert md.returncode == 0 and (tmp_path / "r.md").read_text().startswith("# mix")
    bad = run_report("export", str(job), "-f", "yaml")
    assert bad.returncode == 2 and "atif, jsonl, csv, markdown" in bad.stdout + bad.stderr
    missing = run_report("export", str(tmp_path / "nope"), "-f", "csv")
    assert missing.returncode == 2 and "not a job folder" in missing.stdout + missing.stderr
