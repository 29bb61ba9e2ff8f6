"""The viewer's JSON API on synthetic job folders: lists, statuses, trajectories in every
wire format, paging of a 100 MB log, live updates, and paths that must stay inside."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from .viewer_support import (
    chat_exchange,
    served,
    write_builtin_trial,
    write_config,
    write_json,
    write_result,
)


def messages_exchange() -> dict[str, Any]:
    """An Anthropic Messages exchange: a tool result (an error) comes back, the model
    thinks, answers and calls another tool."""
    return {
        "seq": 2, "format": "messages", "model": "anthropic/claude", "status": 200,
        "started_at": time.time(), "latency_sec": 0.5, "ttft_sec": 0.1, "attempts": 1,
        "request": {"model": "claude", "system": "Be careful.", "messages": [
            {"role": "user", "content": "Do the task."},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "tu_1", "name": "bash", "input": {"cmd": "ls"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "tu_1", "is_error": True,
                 "content": [{"type": "text", "text": "ls: cannot access"}]}]}]},
        "response": {"content": [
            {"type": "thinking", "thinking": "The listing failed."},
            {"type": "text", "text": "Trying again."},
            {"type": "tool_use", "id": "tu_2", "name": "bash", "input": {"cmd": "ls -a"}}],
            "stop_reason": "tool_use"},
        "usage": {"input_tokens": 900, "output_tokens": 40, "cache_read_tokens": 500,
                  "cache_write_tokens": 0, "reasoning_tokens": 0, "total_tokens": 940},
        "cost_usd": 0.002,
    }


def responses_exchange() -> dict[str, Any]:
    """An OpenAI Responses exchange after one function call."""
    return {
        "seq": 1, "format": "responses", "model": "openai/gpt", "status": 200,
        "started_at": time.time(), "latency_sec": 0.3,
        "request": {"model": "gpt", "instructions": "You are terse.", "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "Count files."}]},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "list"}]},
            {"type": "function_call", "call_id": "fc_1", "name": "shell",
             "arguments": "{\"command\": \"ls | wc -l\"}"},
            {"type": "function_call_output", "call_id": "fc_1", "output": "3\n"}]},
        "response": {"status": "completed", "output": [
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "got 3"}]},
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": "There are 3 files."}]}]},
        "usage": {"input_tokens": 300, "output_tokens": 12, "cache_read_tokens": 0,
                  "cache_write_tokens": 0, "reasoning_tokens": 4, "total_tokens": 312},
        "cost_usd": None,
    }


def write_log(trial: Path, records: list[dict[str, Any]]) -> None:
    path = trial / "trajectory" / "llm_trajectory.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.fixture
def jobs(tmp_path: Path) -> Path:
    root = tmp_path / "jobs"
    done = root / "done"
    write_config(done, ["alpha", "beta", "gamma", "delta"])
    write_result(done, "alpha", reward=1.0)
    write_builtin_trial(done / "alpha__1", 3)
    write_result(done, "beta", reward=0.0)
    write_log(done / "beta__1", [messages_exchange()])
    write_result(done, "gamma", reward=None, error={
        "kind": "reward_missing", "message": "test.sh wrote no reward", "phase": "verify"})
    write_result(done, "delta", reward=0.0, error={
        "kind": "agent_timeout", "message": "timed out", "phase": "agent"})
    write_log(done / "delta__1", [responses_exchange()])
    (done / "gamma__1" / "verifier").mkdir(parents=True)
    (done / "gamma__1" / "verifier" / "test_stdout.txt").write_text("collected 3 items\n")
    write_json(done / "summary.json", {
        "schema_version": 1, "job_name": "done", "agent": "builtin", "model": "scripted/x",
        "n_trials_planned": 4, "n_trials": 4, "n_passed": 1, "n_failed": 2, "n_errored": 1,
        "pass_rate": 1 / 3, "mean_reward": 1 / 3, "complete": True})
    live = root / "live"
    write_config(live, ["one", "two", "three"])
    write_result(live, "one", reward=1.0)
    (live / "two__1").mkdir()
    (live / "two__1" / "trial.log").write_text("phase agent started\n")
    old = root / "old"
    write_config(old, ["x"])
    (old / "x__1").mkdir()
    stale = time.time() - 3600
    for p in [old / "config.json", old / "x__1"]:
        os.utime(p, (stale, stale))
    (root / "not-a-job").mkdir()
    return root


def get(url: str, path: str, **kw: Any) -> Any:
    r = httpx.get(url + path, timeout=30, **kw)
    assert r.status_code == 200, r.text
    return r.json()


def test_jobs_list_shows_state_and_figures(jobs: Path) -> None:
    with served(jobs) as url:
        data = get(url, "/api/jobs")
    rows = {r["name"]: r for r in data["jobs"]}
    assert set(rows) == {"done", "live", "old"}
    assert rows["done"]["state"] == "complete" and rows["done"]["n_errored"] == 1
    assert rows["live"]["state"] == "running" and rows["live"]["n_trials"] == 1
    assert rows["live"]["n_trials_planned"] == 3
    assert rows["old"]["state"] == "incomplete"


def test_job_detail_has_one_row_per_planned_trial_with_its_status(jobs: Path) -> None:
    with served(jobs) as url:
        done = get(url, "/api/jobs/done")
        live = get(url, "/api/jobs/live")
    status = {t["trial"]: t["status"] for t in done["trials"]}
    # an agent timeout is the agent's own failure: scored; a missing reward is errored
    assert status == {"alpha__1": "passed", "beta__1": "failed", "gamma__1": "errored",
                      "delta__1": "failed"}
    delta = next(t for t in done["trials"] if t["trial"] == "delta__1")
    assert delta["error_kind"] == "agent_timeout" and delta["error_phase"] == "agent"
    assert {t["trial"]: t["status"] for t in live["trials"]} == {
        "one__1": "passed", "two__1": "running", "three__1": "queued"}


def test_builtin_steps_interleave_prompts_turns_and_tools_with_exchange_facts(jobs):
    with served(jobs) as url:
        page = get(url, "/api/jobs/done/trials/alpha__1/steps?offset=0&limit=100")
    assert page["source"] == "builtin" and page["total"] == 7  # 4 turns + 3 tool lines
    kinds = [s["kind"] for s in page["steps"]]
    assert kinds == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant",
                     "tool", "assistant"]
    first = page["steps"][2]
    assert first["thinking"] == "thinking 1" and first["tool_calls"][0]["name"] == "write_file"
    assert first["llm"]["input_tokens"] == 100 - 0 and first["llm"]["seq"] == 1
    last = page["steps"][-1]
    assert last["text"] == "All done." and last["llm"]["seq"] == 4
    tool = page["steps"][3]["tool"]
    assert tool["name"] == "write_file" and tool["duration_sec"] == 0.01


def test_messages_format_steps_carry_tool_errors_thinking_and_calls(jobs: Path) -> None:
    with served(jobs) as url:
        page = get(url, "/api/jobs/done/trials/beta__1/steps")
    assert page["source"] == "gateway"
    tool, answer = page["steps"]
    assert tool["kind"] == "tool" and tool["tool"]["name"] == "bash"
    assert tool["tool"]["is_error"] is True and "cannot access" in tool["tool"]["output"]
    assert answer["thinking"] == "The listing failed." and answer["text"] == "Trying again."
    assert answer["tool_calls"] == [{"id": "tu_2", "name": "bash",
                                     "arguments": '{"cmd": "ls -a"}'}]
    assert answer["llm"]["cache_read_tokens"] == 500 and answer["llm"]["ttft_sec"] == 0.1


def test_responses_format_steps_start_with_instructions_and_input(jobs: Path) -> None:
    with served(jobs) as url:
        page = get(url, "/api/jobs/done/trials/delta__1/steps")
        exchange = get(url, "/api/jobs/done/trials/delta__1/exchanges/0")
    kinds = [(s["kind"], s.get("text") or s.get("tool", {}).get("output")) for s in
             page["steps"]]
    assert kinds[0] == ("tool", "3\n")  # the first exchange already has a model turn
    assert page["steps"][0]["tool"]["name"] == "shell"
    answer = page["steps"][-1]
    assert answer["text"] == "There are 3 files." and answer["thinking"] == "got 3"
    assert exchange["summary"]["reasoning_tokens"] == 4
    assert exchange["request_params"] == {"model": "gpt"}


def test_exchanges_are_listed_without_bodies_and_shown_one_at_a_time(jobs: Path) -> None:
    with served(jobs) as url:
        listing = get(url, "/api/jobs/done/trials/alpha__1/exchanges?offset=1&limit=2")
        one = get(url, "/api/jobs/done/trials/alpha__1/exchanges/1")
        raw = httpx.get(url + "/api/jobs/done/trials/alpha__1/raw?source=gateway&line=1")
        missing = httpx.get(url + "/api/jobs/done/trials/alpha__1/exchanges/99")
    assert listing["total"] == 4 and listing["next_offset"] == 3
    assert [x["seq"] for x in listing["exchanges"]] == [2, 3]
    assert "request" not in listing["exchanges"][0]
    assert [s["kind"] for s in one["new_input"]] == ["tool"]
    assert one["response"]["choices"][0]["message"]["content"] == "turn 2"
    assert json.loads(raw.content)["seq"] == 2
    assert missing.status_code == 404


def test_trial_detail_has_logs_verifier_output_and_files(jobs: Path) -> None:
    with served(jobs) as url:
        detail = get(url, "/api/jobs/done/trials/gamma__1")
        chunk = get(url, "/api/jobs/done/trials/gamma__1/file?path=verifier/test_stdout.txt"
                    "&offset=-5&length=5")
    assert detail["status"] == "errored"
    assert detail["result"]["error"]["kind"] == "reward_missing"
    assert detail["verifier"]["stdout"]["text"] == "collected 3 items\n"
    assert {f["path"] for f in detail["files"]} >= {"result.json", "verifier/test_stdout.txt"}
    assert chunk["text"] == "tems\n" and chunk["eof"] is True


def test_changes_lists_writes_made_through_file_tools(jobs: Path) -> None:
    with served(jobs) as url:
        changes = get(url, "/api/jobs/done/trials/alpha__1/changes")
    assert [(c["kind"], c["path"]) for c in changes["changes"]] == [("write", "/app/x.py")]
    assert changes["changes"][0]["content"] == "print(1)\n"


def test_paths_outside_the_job_and_other_hosts_are_refused(jobs: Path, tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("no")
    trial = jobs / "done" / "alpha__1"
    (trial / "link").symlink_to(tmp_path / "secret.txt")
    base = "/api/jobs/done/trials/alpha__1/file?path="
    with served(jobs) as url:
        for bad in ("../../secret.txt", "/etc/passwd", "link", "..%2F..%2Fsecret.txt"):
            assert httpx.get(url + base + bad).status_code == 403, bad
        assert httpx.get(url + "/api/jobs/..%2F..").status_code == 404
        assert httpx.get(url + "/api/jobs/not-a-job").status_code == 404
        assert httpx.get(url + "/api/jobs/done/trials/%2E%2E").status_code == 404
        assert httpx.get(url + "/api/jobs", headers={"Host": "evil.example"}).status_code == 403
        assert httpx.get(url + "/").status_code == 200
        assert "app.js" in httpx.get(url + "/").text
        assert httpx.get(url + "/static/app.js").status_code == 200


def test_a_running_trial_shows_new_records_and_the_job_signature_moves(jobs: Path) -> None:
    trial = jobs / "live" / "two__1"
    first = chat_exchange(1, [{"role": "user", "content": "go"}],
                          {"role": "assistant", "content": "working"})
    write_log(trial, [first])
    with served(jobs) as url:
        before = get(url, "/api/jobs/live/signature")["signature"]
        assert get(url, "/api/jobs/live/trials/two__1/steps")["total"] == 1
        log = trial / "trajectory" / "llm_trajectory.jsonl"
        with log.open("a") as fh:
            fh.write(json.dumps(chat_exchange(2, [{"role": "assistant", "content": "working"},
                                                 {"role": "user", "content": "more"}],
                                              {"role": "assistant", "content": "done"})))
            fh.flush()
            # a half-written line is not shown yet
            assert get(url, "/api/jobs/live/trials/two__1/steps")["total"] == 1
            fh.write("\n")
        page = get(url, "/api/jobs/live/trials/two__1/steps?offset=1")
        assert page["total"] == 2 and page["steps"][-1]["text"] == "done"
        write_result(jobs / "live", "two", reward=1.0)
        assert get(url, "/api/jobs/live/signature")["signature"] != before
        assert get(url, "/api/jobs/live/trials/two__1")["status"] == "passed"


def test_compare_endpoint_returns_the_report_comparison(jobs: Path) -> None:
    from sandlot.report.compare import compare_jobs

    with served(jobs) as url:
        data = get(url, "/api/compare?jobs=done,live")
        bad = httpx.get(url + "/api/compare?jobs=done")
    assert data == json.loads(json.dumps(compare_jobs([jobs / "done", jobs / "live"])))
    assert bad.status_code == 400


@pytest.mark.slow
def test_a_100_mb_trajectory_pages_without_loading_it_whole(tmp_path: Path) -> None:
    job = tmp_path / "jobs" / "big"
    write_config(job, ["huge"])
    write_builtin_trial(job / "huge__1", 10_000, output_bytes=5_000)
    write_result(job, "huge", reward=0.0)
    size = sum(p.stat().st_size for p in (job / "huge__1").rglob("*.jsonl"))
    assert size > 100_000_000
    with served(job.parent) as url:
        started = time.monotonic()
        head = get(url, "/api/jobs/big/trials/huge__1/steps?offset=0&limit=100")
        first = time.monotonic() - started  # includes indexing both files once
        started = time.monotonic()
        tail = get(url, f"/api/jobs/big/trials/huge__1/steps?offset={head['total'] - 50}"
                        "&limit=100")
        again = time.monotonic() - started
        started = time.monotonic()
        exchanges = get(url, "/api/jobs/big/trials/huge__1/exchanges?offset=9990&limit=20")
        listing = time.monotonic() - started
    assert head["total"] == 20_001 and len(head["steps"]) == 102  # + system and user
    assert tail["steps"][-1]["text"] == "All done." and tail["next_offset"] is None
    assert tail["steps"][-1]["llm"]["seq"] == 10_001
    assert exchanges["total"] == 10_001 and len(exchanges["exchanges"]) == 11
    assert first < 5, f"first page {first:.2f}s"
    assert again < 0.5, f"a later page {again:.2f}s"
    assert listing < 0.5, f"exchange listing {listing:.2f}s"
