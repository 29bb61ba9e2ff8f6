"""`sandlot view` in headless Chromium: the pages people use, on jobs the tests ran.

Each test saves a screenshot (see the `artifacts` fixture) and fails on any console
error, uncaught exception or failed request.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from .conftest import Page
from .viewer_support import (
    TASKS,
    chat_exchange,
    viewer_process,
    write_builtin_trial,
    write_config,
    write_json,
    write_result,
)

pytestmark = [pytest.mark.e2e]


@pytest.fixture(scope="module")
def viewer(example_jobs: Path):
    with viewer_process(example_jobs) as url:
        yield url


def assert_steps_unique(tab: Page) -> None:
    ids = tab.page.eval_on_selector_all(".step[data-step]", "els => els.map(e => e.dataset.step)")
    assert ids and len(ids) == len(set(ids)), ids


def shot(tab: Page, artifacts: Path, name: str, *, full_page: bool = True) -> Path:
    path = artifacts / f"{name}.png"
    tab.page.screenshot(path=str(path), full_page=full_page)
    assert path.stat().st_size > 10_000
    return path


def test_job_list_shows_every_job_with_its_pass_rate(viewer, tab, artifacts):
    page = tab.page
    page.goto(viewer)
    page.wait_for_selector("table.data tbody tr td a")
    rows = {r.locator("td").nth(1).inner_text(): r
            for r in page.locator("table.data tbody tr").all()}
    assert set(rows) == {"solver", "giveup", "first5", "last5"}
    assert "100.0%" in rows["solver"].inner_text()
    assert "0.0%" in rows["giveup"].inner_text()
    assert "55.6%" in rows["first5"].inner_text()  # 5 of 9
    assert "complete" in rows["last5"].inner_text()
    shot(tab, artifacts, "01-jobs")
    assert tab.errors == []


def test_job_page_has_charts_and_filters_trials(viewer, tab, artifacts):
    page = tab.page
    page.goto(f"{viewer}#/job/first5")
    page.wait_for_selector("#filters")
    assert page.locator(".chart svg").count() == 4  # reward, phases, tokens, cost vs reward
    assert page.locator("table.data tbody tr").count() == len(TASKS)
    page.click("#filters button[data-filter=failed]")
    failed = page.locator("table.data tbody tr")
    assert failed.count() == 4
    assert all(name.startswith(tuple(TASKS[5:])) for name in
               failed.locator("td:first-child").all_inner_texts())
    page.fill("#filters input[type=search]", TASKS[6])
    assert page.locator("table.data tbody tr").count() == 1
    shot(tab, artifacts, "02-job-first5")
    assert tab.errors == []


def test_trial_page_shows_tool_calls_repairs_and_exchanges(viewer, tab, artifacts):
    page = tab.page
    trial = f"{TASKS[0]}__1"
    page.goto(f"{viewer}#/job/giveup/trial/{trial}")
    page.wait_for_selector(".step.k-tool")
    # the instruction, the model's thinking, its bash call with arguments, and the output
    assert page.locator(".step.k-user").first.inner_text().strip() != ""
    assert "Look at what is there" in page.locator(".step .thinking").first.inner_text()
    call = page.locator(".step.k-assistant .call").first
    assert "bash" in call.inner_text() and '"command": "ls -la"' in call.inner_text()
    assert "exit code 0" in page.locator(".step.k-tool").first.inner_text()
    # each model turn carries its tokens and latency from the gateway
    assert "in 1.2k" in page.locator(".step.k-assistant .chip").first.inner_text()
    # the repair feedback went back to the agent as the next user message
    assert "not complete yet" in page.locator(".step.k-user").last.inner_text()
    page.wait_for_timeout(500)  # let any stray page load land before counting
    assert_steps_unique(tab)
    assert page.locator(".step").count() == 7  # system, user, 2 turns + tool, user, turn
    shot(tab, artifacts, "03-trial-trajectory")

    page.click(".tabs button[data-tab=repairs]")
    page.wait_for_selector(".repair")
    assert page.locator(".repair").count() == 2
    assert "not complete yet" in page.locator(".repair").nth(1).inner_text()
    shot(tab, artifacts, "04-trial-repairs")

    page.click(".tabs button[data-tab='LLM exchanges']")
    page.wait_for_selector("table.data tbody tr.click")
    assert page.locator("table.data tbody tr").count() == 3  # 2 turns + 1 after feedback
    page.locator("table.data tbody tr").first.click()
    page.wait_for_selector("text=New input in this request")
    assert "scripted/giveup" in page.locator(".panel").last.inner_text()

    page.click(".tabs button[data-tab=verifier]")
    page.wait_for_selector("text=verifier/test_stdout.txt")
    shot(tab, artifacts, "05-trial-verifier")
    assert tab.errors == []


def test_trial_page_lists_file_changes_from_tool_calls(viewer, tab, artifacts):
    page = tab.page
    page.goto(f"{viewer}#/job/solver/trial/semver-compare__1")
    page.click(".tabs button[data-tab=changes]")
    # The workspace diff the trial recorded, then the files the tool calls changed (which
    # the page fills in when the trajectory has loaded: wait for them, not the first code).
    page.wait_for_selector(".panel code:has-text('/app/semver.py')")
    codes = page.locator(".panel code").all_inner_texts()
    assert any("/app/semver.py" in c for c in codes), codes
    shot(tab, artifacts, "06-trial-changes")
    assert tab.errors == []


def test_comparison_page_from_the_job_list(viewer, tab, artifacts):
    page = tab.page
    page.goto(viewer)
    page.wait_for_selector("table.data tbody tr")
    for name in ("first5", "last5"):
        page.check(f"input[aria-label='select {name}']")
    page.click("#compare-btn")
    page.wait_for_selector(".verdict")
    first_selected = page.url.split("jobs=")[1].split(",")[0]
    verdict = page.locator(".verdict").inner_text()
    assert verdict.startswith("no significant difference")
    assert "4 lost, 4 gained" in verdict
    gained = page.locator(".comparison .gained").inner_text()
    lost = page.locator(".comparison .lost").inner_text()
    a_won, b_won = (TASKS[:4], TASKS[5:]) if first_selected == "first5" else (TASKS[5:],
                                                                           TASKS[:4])
    assert sorted(gained.split(", ")) == b_won and sorted(lost.split(", ")) == a_won
    page.click("#flips-only")
    assert page.locator("table.data").last.locator("tbody tr").count() == 8
    shot(tab, artifacts, "07-compare")
    assert tab.errors == []


def test_comparison_page_says_a_real_difference_is_significant(viewer, tab, artifacts):
    page = tab.page
    page.goto(f"{viewer}#/compare?jobs=solver,giveup")
    page.wait_for_selector(".verdict.sig")
    text = page.locator(".verdict").inner_text()
    assert text.startswith("solver is better than giveup") and "p = 0.00391" in text
    shot(tab, artifacts, "08-compare-significant")
    assert tab.errors == []


@pytest.mark.slow
def test_a_10k_step_trajectory_opens_fast_and_pages_to_the_end(tmp_path, tab, artifacts):
    job = tmp_path / "jobs" / "big"
    write_config(job, ["huge"])
    write_builtin_trial(job / "huge__1", 10_000, output_bytes=5_000)
    write_result(job, "huge", reward=0.0)
    size = sum(p.stat().st_size for p in (job / "huge__1").rglob("*.jsonl"))
    assert size > 100_000_000
    page = tab.page
    with viewer_process(job.parent) as url:
        started = time.monotonic()
        page.goto(f"{url}#/job/big/trial/huge__1")
        page.wait_for_selector(".step.k-tool")
        first_paint = time.monotonic() - started
        assert first_paint < 10, f"first page took {first_paint:.1f}s"
        assert page.locator(".step").count() < 400  # one page, not the whole log
        started = time.monotonic()
        page.click("text=jump to the end")
        page.wait_for_selector("text=All done.")
        assert time.monotonic() - started < 5
        page.click("text=load earlier")
        page.wait_for_function("document.querySelectorAll('.step').length > 150")
        assert_steps_unique(tab)
        shot(tab, artifacts, "09-big-trajectory-end", full_page=False)
    assert tab.errors == []


def test_a_running_job_refreshes_as_trials_finish(tmp_path, tab, artifacts):
    job = tmp_path / "jobs" / "live"
    write_config(job, ["alpha", "beta"])
    write_result(job, "alpha", reward=1.0)
    running = job / "beta__1"
    (running / "trajectory").mkdir(parents=True)
    (running / "trial.log").write_text("phase agent started\n")
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}]
    log = running / "trajectory" / "llm_trajectory.jsonl"
    log.write_text(json.dumps(chat_exchange(1, messages, {
        "role": "assistant", "content": "step one", "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "bash", "arguments": "{\"command\": \"ls\"}"}}]})) + "\n")
    page = tab.page
    with viewer_process(job.parent) as url:
        page.goto(f"{url}#/job/live")
        page.wait_for_selector("#live:not([hidden])")
        assert "running" in page.locator("table.data tbody").inner_text()
        page.goto(f"{url}#/job/live/trial/beta__1")
        page.wait_for_selector("text=step one")
        with log.open("a") as fh:  # the agent goes on: a new exchange lands
            fh.write(json.dumps(chat_exchange(2, [messages[1], {
                "role": "assistant", "content": "step one", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {
                        "name": "bash", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "file-a"}], {
                "role": "assistant", "content": "step two"})) + "\n")
        page.wait_for_selector("text=step two", timeout=10_000)
        assert "file-a" in page.locator(".step.k-tool").last.inner_text()
        assert_steps_unique(tab)
        page.goto(f"{url}#/job/live")
        page.wait_for_selector("table.data tbody")
        write_result(job, "beta", reward=0.0)  # the trial finishes
        page.wait_for_function(
            "!document.querySelector('table.data tbody').innerText.includes('running')",
            timeout=10_000)
        assert "failed" in page.locator("table.data tbody").inner_text()
        shot(tab, artifacts, "10-live-job")
    assert tab.errors == []


def test_tampered_and_verifier_breaking_failures_are_shown_apart(tmp_path, tab, artifacts):
    """A tampered trial, one whose verifier the agent broke, an honest failure and an
    error the task caused: the job list, the job page and the trial page keep them apart."""
    job = tmp_path / "jobs" / "cheats"
    write_config(job, ["deep", "broke", "honest", "flaky"])
    tampered = write_result(job, "deep", reward=0.0)
    tampered["integrity"] = {"status": "tampered", "reason": "a folder deeper than 256 levels",
                             "paths": ["/app/d/d/d"], "caps_hit": [
                                 "agent logs: 2 entries left out (agent/logs-left-out.txt)"]}
    write_json(job / "deep__1" / "result.json", tampered)
    broke = write_result(job, "broke", reward=0.0)
    broke["integrity"] = {"status": "clean"}
    broke["verifier_failure"] = {"kind": "reward_missing", "message": "test.sh wrote none",
                                 "caused_by": "agent", "pristine_reward": 1.0}
    write_json(job / "broke__1" / "result.json", broke)
    write_result(job, "honest", reward=0.0)
    write_result(job, "flaky", reward=None, error={
        "kind": "verifier_error", "message": "test.sh crashed", "phase": "verify",
        "caused_by": "task"})
    page = tab.page
    with viewer_process(job.parent) as url:
        page.goto(url)
        page.wait_for_selector("table.data tbody tr td a")
        assert page.locator("table.data tbody .b-tampered").inner_text() == "1"
        page.goto(f"{url}#/job/cheats")
        page.wait_for_selector("#filters")
        cards = page.locator(".cards").inner_text()
        assert "1 · 1 · 1" in cards and "broke verifier" in cards, cards
        assert "Errors by who caused them: task × 1" in page.locator("body").inner_text()
        page.click("#filters button[data-filter=tampered]")
        rows = page.locator("table.data tbody tr")
        assert rows.count() == 1 and "deep__1" in rows.inner_text()
        shot(tab, artifacts, "11-tampered-job")
        page.goto(f"{url}#/job/cheats/trial/deep__1")
        box = page.locator(".errbox.integrity")
        box.wait_for()
        assert "tampered" in box.inner_text() and "deeper than 256" in box.inner_text()
        assert "/app/d/d/d" in box.inner_text()
        assert "agent logs: 2 entries left out" in page.locator(".note.integrity").inner_text()
        page.goto(f"{url}#/job/cheats/trial/broke__1")
        page.wait_for_selector(".errbox.integrity")
        assert "broke the verifier" in page.locator(".errbox.integrity").inner_text()
        shot(tab, artifacts, "12-broke-verifier-trial")
    assert tab.errors == []


def test_a_multi_step_trial_shows_each_step_and_why_the_rest_stopped(tmp_path, tab, artifacts):
    job = tmp_path / "jobs" / "steps"
    write_config(job, ["counter"])
    result = write_result(job, "counter", reward=0.5)
    result["steps"] = [
        {"name": "create", "reward": 1.0, "rewards": {"reward": 1.0}, "passed": True,
         "timing": {"agent": 1.5, "verify": 0.5}},
        {"name": "extend", "reward": 0.0, "rewards": {"reward": 0.0}, "passed": False,
         "timing": {"agent": 2.0, "verify": 0.4}}]
    result["multi_step"] = {"strategy": "mean", "n_steps": 3, "n_run": 2,
                            "stopped_after": "extend",
                            "stop_reason": "min_reward: reward = 0, below its min_reward 1"}
    write_json(job / "counter__1" / "result.json", result)
    out = job / "counter__1" / "steps" / "extend" / "verifier" / "test_stdout.txt"
    out.parent.mkdir(parents=True)
    out.write_text("lines=1 expect=2\n")
    page = tab.page
    with viewer_process(job.parent) as url:
        page.goto(f"{url}#/job/steps/trial/counter__1")
        page.click("button[data-tab='task steps']")
        page.wait_for_selector("table.data tbody tr")
        table = page.locator("table.data").first.inner_text()
        assert "create" in table and "extend" in table and "passed" in table, table
        assert "stopped after step extend: min_reward" in page.locator(".errbox").inner_text()
        assert "2 of 3 steps ran" in page.locator("body").inner_text()
        page.click("text=extend: test output")
        assert "lines=1 expect=2" in page.locator("body").inner_text()
        shot(tab, artifacts, "13-multi-step-trial")
    assert tab.errors == []


def test_a_trials_artifacts_are_listed_and_open(tmp_path, tab, artifacts):
    job = tmp_path / "jobs" / "art"
    write_config(job, ["collect"])
    result = write_result(job, "collect", reward=1.0)
    result["artifacts"] = [
        {"source": "/var/log/app", "destination": "artifacts/var/log/app", "type": "directory",
         "status": "ok", "bytes": 8, "left_out": 0, "note": None, "exclude": []},
        {"source": "/app/big.bin", "destination": "artifacts/app/big.bin", "type": "file",
         "status": "cut", "bytes": 0, "left_out": 1, "note": "3000000 bytes, past the budget",
         "exclude": []}]
    write_json(job / "collect__1" / "result.json", result)
    log = job / "collect__1" / "artifacts" / "var" / "log" / "app" / "a.log"
    log.parent.mkdir(parents=True)
    log.write_text("started the app\n")
    page = tab.page
    with viewer_process(job.parent) as url:
        page.goto(f"{url}#/job/art/trial/collect__1")
        page.click("button[data-tab='artifacts']")
        page.wait_for_selector("table.data tbody tr")
        table = page.locator("table.data").first.inner_text()
        assert "/var/log/app" in table and "cut" in table and "past the budget" in table
        page.click("text=artifacts/var/log/app/a.log")
        page.wait_for_selector("pre:has-text('started the app')")
        shot(tab, artifacts, "14-artifacts")
    assert tab.errors == []


def test_where_a_datasets_tasks_came_from_is_shown(tmp_path, tab, artifacts):
    job = tmp_path / "jobs" / "ds"
    source = {"dataset": "demo", "version": "2.0", "version_from": "newest",
              "registry": "https://registry.example/registry.json", "task": "fix-git",
              "git_url": "https://git.example/demo.git",
              "git_commit_id": "0123456789abcdef0123456789abcdef01234567", "path": "tasks/fix-git"}
    write_config(job, ["fix-git", "local"])
    config = json.loads((job / "config.json").read_text())
    config["task_sources"] = {"fix-git": source}
    write_json(job / "config.json", config)
    result = write_result(job, "fix-git", reward=1.0)
    result["task_source"] = source
    write_json(job / "fix-git__1" / "result.json", result)
    write_result(job, "local", reward=0.0)
    page = tab.page
    with viewer_process(job.parent) as url:
        page.goto(f"{url}#/job/ds")
        page.wait_for_selector(".dataset-sources")
        note = page.locator(".dataset-sources").inner_text()
        assert "demo@2.0 (newest) from https://registry.example/registry.json × 1" in note
        assert "1 from folders" in note
        page.goto(f"{url}#/job/ds/trial/fix-git__1")
        page.wait_for_selector(".task-source")
        line = page.locator(".task-source").inner_text()
        assert "demo@2.0" in line and "0123456789ab : tasks/fix-git" in line
        shot(tab, artifacts, "15-dataset-source")
        page.goto(f"{url}#/job/ds/trial/local__1")
        page.wait_for_selector("h1")
        assert page.locator(".task-source").count() == 0
    assert tab.errors == []


def test_generation_settings_budgets_and_an_early_stop_are_shown(tmp_path, tab, artifacts):
    job = tmp_path / "jobs" / "gen"
    write_config(job, ["spend"])
    config = json.loads((job / "config.json").read_text())
    config.update(generation={"temperature": 0.2, "seed": 7, "model_kwargs": {"top_p": 0.9}},
                  max_trial_tokens=10000, max_job_cost_usd=5.0)
    write_json(job / "config.json", config)
    result = write_result(job, "spend", reward=0.0)
    result["generation"] = {"settings": {"temperature": 0.2, "seed": 7},
                            "agent_sent": {"temperature": [1.0], "max_output_tokens": [32000]},
                            "n_requests_changed": 4, "not_sent": ["seed"]}
    result["error"] = {"kind": "budget_exceeded", "phase": "agent", "caused_by": "agent",
                       "message": "this trial's budget (10,000 tokens) was reached"}
    write_json(job / "spend__1" / "result.json", result)
    from sandlot.models import TrialResult
    from sandlot.report.summary import summarize

    summary = summarize("gen", "builtin", "scripted/x", 2, 1, [TrialResult.model_validate(result)],
                        stopped="the job's budget ($5) was reached: $5.0100 spent",
                        stopped_by="job_budget")
    write_json(job / "summary.json", summary.model_dump(mode="json"))
    page = tab.page
    with viewer_process(job.parent) as url:
        page.goto(f"{url}#/job/gen")
        page.wait_for_selector(".job-settings")
        note = page.locator(".job-settings").inner_text()
        assert "temperature 0.2" in note and "seed 7" in note and "top_p=0.9" in note
        assert "budget per trial: 10" in note and "budget for the job: $5.0000" in note
        assert "the job's budget ($5) was reached" in page.locator(".job-stopped").inner_text()
        page.goto(f"{url}#/job/gen/trial/spend__1")
        page.wait_for_selector(".trial-generation")
        line = page.locator(".trial-generation").inner_text()
        assert "temperature 0.2" in line and "4 requests changed" in line
        assert "the agent sent: temperature 1, max_output_tokens 32000" in line
        assert "not in the agent's format: seed" in line
        assert "budget_exceeded" in page.locator(".errbox").inner_text()
        shot(tab, artifacts, "16-generation-and-budget")
    assert tab.errors == []
