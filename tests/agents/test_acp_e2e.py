"""Real ACP agents from npm, end to end: installed by sandlot's installer, run by the real
CLI in the local sandbox, talking to the scripted model through the gateway.

claude (@agentclientprotocol/claude-agent-acp) and codex (@zed-industries/codex-acp) are
installed once into a folder kept across test runs (sandlot's own cache,
emptied by `sandlot clean`), like Pi's e2e tests. The last tests need no npm package: an ACP
agent that crashes on start and one that never answers the handshake, through the CLI.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import EXAMPLES, REPO, kept_downloads_dir, sandlot_cmd, trial_story
from sandlot.agents.acp_registry import BUILTIN_SPECS
from sandlot.agents.install import AgentInstallError, install_npm_package

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SCRIPTS = Path(__file__).parent / "scripts_acp"
REAL_AGENTS = ["claude", "codex"]
#: Installed too, with a test of their own below: gemini speaks Google's generateContent
#: to the gateway, opencode Chat Completions.
INSTALLED_AGENTS = [*REAL_AGENTS, "gemini", "opencode"]
CHECK_PY = '''answer = open("/app/answer.txt").read().strip()
assert answer == "42", "the answer file holds the wrong number"
'''
CHECK_SH = """
    if python3 /tests/check.py; then echo 1 > /logs/verifier/reward.txt
    else echo 0 > /logs/verifier/reward.txt; fi
"""
#: Example tasks whose solver script writes over an existing file with `write`.
CLAUDE_WRITE_OVER_EXISTING = {"fix-interval-merge", "semver-compare", "service-config-update",
                              "text-utils-partial"}


@pytest.fixture(scope="session")
def agents_cache(cache_dir: Path) -> Path:
    """claude and codex installed once through sandlot's installer into a folder kept
    across runs, linked into the session's sandlot cache so the CLI finds them there."""
    keep = kept_downloads_dir()
    for name in INSTALLED_AGENTS:
        spec = BUILTIN_SPECS[name]
        assert spec.npm and spec.version
        try:
            folder = asyncio.run(install_npm_package(keep, name, spec.npm, spec.version))
        except AgentInstallError as exc:
            pytest.skip(f"cannot install {spec.npm}@{spec.version} here: {exc}")
        link = cache_dir / "agents" / name / spec.version
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists():
            link.symlink_to(folder, target_is_directory=True)
    return cache_dir


def _cli(cache_dir: Path, *args: str, timeout: float = 600,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "SANDLOT_CACHE_DIR": str(cache_dir), "COLUMNS": "200",
                "PYTHONPATH": str(REPO / "tests"), **(env or {})}
    return subprocess.run(sandlot_cmd(*args), capture_output=True, text=True,
                          timeout=timeout, env=full_env, cwd=REPO)


def _run(cache_dir: Path, tasks: Path, jobs: Path, agent: str, model: str, *extra: str,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return _cli(cache_dir, "run", str(tasks), "--agent", agent, "--model", model,
                "--scripts-dir", str(SCRIPTS), "--jobs-dir", str(jobs), "--job-name", "j",
                *extra, env=env)


def _result(trial: Path) -> dict:
    return json.loads((trial / "result.json").read_text())


def _acp_lines(trial: Path) -> list[dict]:
    path = trial / "trajectory" / "acp_trajectory.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _updates(lines: list[dict], kind: str) -> list[dict]:
    return [x["message"]["params"]["update"] for x in lines if x["type"] == "message"
            and x["message"].get("method") == "session/update"
            and x["message"]["params"]["update"].get("sessionUpdate") == kind]


def _sent(lines: list[dict], method: str) -> list[dict]:
    return [x["message"] for x in lines if x["type"] == "message"
            and x["direction"] == "client_to_agent" and x["message"].get("method") == method]


def _exchanges(trial: Path) -> list[dict]:
    lines = (trial / "trajectory" / "llm_trajectory.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def _agent_processes(name: str) -> str:
    found = subprocess.run(["pgrep", "-af", f"/opt/sandlot/agents/{name}/"],
                           capture_output=True, text=True)
    return found.stdout.strip()


def _answer_task(make_task, name: str, **kwargs: object) -> Path:
    return make_task(name, files={"tests/check.py": CHECK_PY}, test_sh=CHECK_SH, **kwargs)


@pytest.fixture(scope="module", params=REAL_AGENTS)
def example_trial(request: pytest.FixtureRequest, agents_cache: Path,
                  tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    agent = request.param
    jobs = tmp_path_factory.mktemp(f"acp-example-{agent}")
    proc = _cli(agents_cache, "run", str(EXAMPLES), "-i", "csv-top-customers", "--agent",
                agent, "--model", "scripted/solver", "--jobs-dir", str(jobs), "--job-name", "j")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return agent, jobs / "j" / "csv-top-customers__1"


def test_an_example_task_passes_with_tool_calls_and_usage_on_record(example_trial):
    agent, trial = example_trial
    result = _result(trial)
    assert result["passed"] and result["error"] is None, result
    info = result["agent_info"]
    assert info["agent"] == agent and info["agent_version"] == BUILTIN_SPECS[agent].version
    # The solver runs two commands and writes one file; for Claude the scripted model
    # reads the file first, as Claude Code's Write requires.
    expected_calls = 4 if agent == "claude" else 3
    assert info["done_reason"] == "end_turn" and info["tool_calls"] == expected_calls
    assert "execute" in info["tools_used"]
    assert "top_customers.sh" in info["final_response"]
    assert info["acp"]["protocol_version"] == 1 and info["acp"]["session_id"]
    # The trajectory holds every update: the tool calls and the usage snapshots.
    lines = _acp_lines(trial)
    assert lines[0]["type"] == "header" and lines[0]["agent"] == agent
    calls = {u["toolCallId"] for u in _updates(lines, "tool_call")}
    assert len(calls) == expected_calls
    assert _updates(lines, "usage_update")
    assert info["session"]["context"]["used"] > 0
    (prompt,) = _sent(lines, "session/prompt")
    assert prompt["params"]["prompt"][0]["text"] == (EXAMPLES / "csv-top-customers" /
                                                     "instruction.md").read_text()
    # The gateway's count is the trusted one; it saw every model call.
    usage = result["usage"]
    assert usage["source"] == "gateway" and usage["n_requests"] == len(_exchanges(trial)) == 4
    assert not _agent_processes(agent)


def test_claude_reports_usage_that_matches_the_gateway(example_trial):
    agent, trial = example_trial
    result = _result(trial)
    reported = result["agent_info"]["self_reported_usage"]
    if agent == "codex":  # codex-acp sends no PromptResponse.usage (only usage_update)
        assert reported is None
        return
    assert reported["source"] == "acp"
    for key in ("input_tokens", "output_tokens", "cache_read_tokens", "total_tokens"):
        assert reported[key] == result["usage"][key], key
    assert result["agent_info"]["session"]["permission_requests"] >= 1  # auto-approved


AS_USER_TOML = '[agent]\ntimeout_sec = 120\nuser = "agent"\n'
AS_USER_DOCKERFILE = "FROM debian:bookworm-slim\nWORKDIR /app\nRUN chmod 1777 /app\n"


@pytest.mark.parametrize("agent", REAL_AGENTS)
def test_an_acp_agent_runs_as_the_user_the_task_names(agent, agents_cache, make_task,
                                                      tmp_path):
    """[agent] user = "agent": the agent process and its terminal commands run as that
    user; its home folder was handed over to it."""
    _answer_task(make_task, "as-user", task_toml=AS_USER_TOML, dockerfile=AS_USER_DOCKERFILE)
    proc = _run(agents_cache, tmp_path / "tasks", tmp_path / "jobs", agent,
                "scripted/acp-as-user")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trial = tmp_path / "jobs" / "j" / "as-user__1"
    result = _result(trial)
    assert result["passed"], result
    diff = (trial / "agent" / "workspace.diff").read_text()
    assert "+agent" in diff, diff
    assert not _agent_processes(agent)


@pytest.mark.parametrize("agent", REAL_AGENTS)
def test_a_failed_first_attempt_is_repaired_in_the_same_acp_session(agent, agents_cache,
                                                                     make_task, tmp_path):
    _answer_task(make_task, "answer")
    proc = _run(agents_cache, tmp_path / "tasks", tmp_path / "jobs", agent,
                "scripted/acp-repair", "--repair-attempts", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trial = tmp_path / "jobs" / "j" / "answer__1"
    result = _result(trial)
    assert result["passed"] and result["repaired"] and result["counted_attempt"] == 2
    first, second = result["attempts"]
    assert first["evaluation"]["reward"] == 0.0
    feedback = second["feedback"]
    assert "wrong number" in feedback
    assert second["generation"]["final_response"] == "Fixed the answer."
    assert second["generation"]["prompt"] == 2
    # Both prompts went to the one session the handshake created...
    lines = _acp_lines(trial)
    prompts = _sent(lines, "session/prompt")
    assert len(_sent(lines, "session/new")) == 1
    assert [p["params"]["sessionId"] for p in prompts] == [result["agent_info"]["acp"][
        "session_id"]] * 2
    assert prompts[1]["params"]["prompt"][0]["text"] == feedback
    # ...so the model saw the feedback after the whole first conversation.
    last = json.dumps(_exchanges(trial)[-1]["request"])
    assert json.dumps(feedback)[1:-1] in last and "echo 41" in last
    assert not _agent_processes(agent)


@pytest.mark.parametrize("agent", REAL_AGENTS)
def test_a_stalled_model_hits_the_agent_timeout_with_partial_counters(agent, agents_cache,
                                                                       make_task, tmp_path):
    _answer_task(make_task, "stall", agent_timeout=8)
    proc = _run(agents_cache, tmp_path / "tasks", tmp_path / "jobs", agent, "scripted/acp-stall")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trial = tmp_path / "jobs" / "j" / "stall__1"
    result = _result(trial)
    assert result["error"]["kind"] == "agent_timeout", result["error"]
    assert "1 tool calls" in result["error"]["message"]
    info = result["agent_info"]
    assert info["tool_calls"] == 1 and info["done_reason"] == "timeout"
    assert result["usage"]["n_requests"] >= 1 and result["usage"]["input_tokens"] >= 1000
    lines = _acp_lines(trial)
    assert _sent(lines, "session/cancel")
    assert [x["event"] for x in lines if x["type"] == "event"][-1] == "agent_stopped"
    assert result["timing"]["agent"] < 8 + 15
    assert not _agent_processes(agent)


@pytest.mark.parametrize("agent", REAL_AGENTS)
def test_every_example_task_passes(agent, agents_cache, tmp_path, request):
    proc = _cli(agents_cache, "run", str(EXAMPLES), "--agent", agent, "--model",
                "scripted/solver", "-n", "3", "--jobs-dir", str(tmp_path), "--job-name", "all")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = {p.parent.name: _result(p.parent)
               for p in (tmp_path / "all").glob("*/result.json")}
    assert len(results) == 9
    failed = sorted(name for name, r in results.items() if not r["passed"])
    assert not failed, "\n".join(trial_story(tmp_path / "all" / name) for name in failed)


@pytest.mark.parametrize(("agent", "wire", "endpoint"), [
    ("gemini", "gemini", ":streamGenerateContent"),
    ("opencode", "chat", "/v1/chat/completions"),
])
def test_more_acp_agents_solve_example_tasks_in_their_own_format(agents_cache, tmp_path,
                                                                 agent, wire, endpoint):
    """gemini-cli (Google's generateContent, files written by its own tools) and OpenCode
    (Chat Completions) in ACP mode, through the real gateway."""
    tasks = ("csv-top-customers", "semver-compare", "fix-interval-merge")
    args = [arg for task in tasks for arg in ("-i", task)]
    proc = _cli(agents_cache, "run", str(EXAMPLES), *args, "--agent", agent, "--model",
                "scripted/solver", "-n", "2", "--jobs-dir", str(tmp_path), "--job-name", "g")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for task in tasks:
        trial = tmp_path / "g" / f"{task}__1"
        result = _result(trial)
        assert result["passed"] and result["error"] is None, (task, result["error"])
        exchanges = _exchanges(trial)
        assert {x["format"] for x in exchanges} == {wire}
        assert all(x["endpoint"].endswith(endpoint) and x["status"] == 200
                   for x in exchanges)
        usage = result["usage"]
        assert usage["source"] == "gateway" and usage["n_requests"] == len(exchanges) >= 3
        assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
        info = result["agent_info"]
        assert info["agent"] == agent and info["tool_calls"] >= 2
    assert not _agent_processes(agent)


# -- generic ACP agents through the CLI (no npm) ------------------------------------------


def test_an_acp_agent_that_crashes_on_start_gives_its_stderr_tail(run_cli, make_task,
                                                                   tmp_path):
    _answer_task(make_task, "crash")
    proc = run_cli("run", str(tmp_path / "tasks"), "--agent",
                   'acp:sh -c "echo boom: no config file found >&2; exit 2"',
                   "--model", "scripted/hello", "--jobs-dir", str(tmp_path / "jobs"),
                   "--job-name", "j")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = _result(tmp_path / "jobs" / "j" / "crash__1")
    error = result["error"]
    assert error["kind"] == "agent_error"
    assert "exited (code 2) during the handshake" in error["message"]
    assert "boom: no config file found" in error["message"]


def test_an_agent_that_never_answers_the_handshake_is_errored_not_failed(run_cli, make_task,
                                                                          tmp_path):
    _answer_task(make_task, "sleepy")
    agents_file = tmp_path / "agents.toml"
    marker = f"sleepy-{tmp_path.name}"
    agents_file.write_text(f'[agents.sleepy]\ncommand = ["sh", "-c", "sleep 600; : {marker}"]\n'
                           "handshake_timeout_sec = 3\n")
    # Named by --agents-file: the run's catalog must reach every trial of the job.
    proc = run_cli("run", str(tmp_path / "tasks"), "--agent", "sleepy", "--model",
                   "scripted/hello", "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "j",
                   "--agents-file", str(agents_file))
    assert proc.returncode == 4, proc.stdout + proc.stderr  # its only trial errored
    result = _result(tmp_path / "jobs" / "j" / "sleepy__1")
    assert result["error"]["kind"] == "agent_handshake_timeout"
    assert result["reward"] is None and not result["passed"]
    summary = json.loads((tmp_path / "jobs" / "j" / "summary.json").read_text())
    assert summary["n_errored"] == 1 and summary["n_failed"] == 0
    assert result["timing"]["agent"] < 3 + 10
    found = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    assert not found.stdout.strip()


@pytest.mark.parametrize("agent", REAL_AGENTS)
def test_a_model_that_never_stops_is_cut_at_the_trial_budget(agent, agents_cache, make_task,
                                                             tmp_path):
    _answer_task(make_task, "spend")
    proc = _run(agents_cache, tmp_path / "tasks", tmp_path / "jobs", agent, "scripted/runaway",
                "--max-trial-tokens", "10000")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trial = tmp_path / "jobs" / "j" / "spend__1"
    result = _result(trial)
    assert result["error"]["kind"] == "budget_exceeded", result["error"]
    assert "this trial's budget (10,000 tokens) was reached" in result["error"]["message"]
    # runaway spends 2,500 tokens a turn: four are answered, then every request is refused.
    assert result["usage"]["total_tokens"] == 10000
    exchanges = [json.loads(line) for line in
                 (trial / "trajectory" / "llm_trajectory.jsonl").read_text().splitlines()]
    statuses = [e["status"] for e in exchanges]
    assert statuses[:4] == [200] * 4 and set(statuses[4:]) == {402}, statuses
    assert result["reward"] == 0.0
    assert not _agent_processes(agent)


@pytest.mark.parametrize("agent", REAL_AGENTS)
def test_generation_flags_reach_the_model_in_every_acp_request(agent, agents_cache, tmp_path):
    proc = _cli(agents_cache, "run", str(EXAMPLES), "-i", "csv-top-customers", "--agent",
                agent, "--model", "scripted/solver", "--temperature", "0.3",
                "--max-output-tokens", "6000", "--model-kwarg", "top_p=0.5",
                "--jobs-dir", str(tmp_path), "--job-name", "j")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trial = tmp_path / "j" / "csv-top-customers__1"
    result = _result(trial)
    assert result["passed"], result
    exchanges = [json.loads(line) for line in
                 (trial / "trajectory" / "llm_trajectory.jsonl").read_text().splitlines()]
    assert exchanges
    for exchange in exchanges:
        request = exchange["request"]
        assert request["temperature"] == 0.3 and request["top_p"] == 0.5
        # Claude's Messages: max_tokens; codex's Responses: max_output_tokens.
        assert 6000 in (request.get("max_tokens"), request.get("max_output_tokens"))
    generation = result["generation"]
    assert generation["n_requests_changed"] == len(exchanges)
    if agent == "claude":  # what the agent itself asked for is kept beside what was sent
        assert "max_output_tokens" in generation["agent_sent"], generation
