"""The real Pi agent, end to end: installed by sandlot's installer, run by the real CLI in
the local sandbox, talking to the scripted model through the gateway."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import EXAMPLES, REPO, kept_downloads_dir, sandlot_cmd
from sandlot.agents.install import install_npm_package
from sandlot.agents.pi import DEFAULT_VERSION, INSTALL_MOUNT, PACKAGE

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SCRIPTS = Path(__file__).parent / "scripts"
CHECK_PY = '''answer = open("/app/answer.txt").read().strip()
assert answer == "42", "the answer file holds the wrong number"
'''
CHECK_SH = """
    if python3 /tests/check.py; then echo 1 > /logs/verifier/reward.txt
    else echo 0 > /logs/verifier/reward.txt; fi
"""


@pytest.fixture(scope="session")
def pi_cache(cache_dir: Path) -> Path:
    """Pi installed once through sandlot's own installer into a folder kept across test
    runs (sandlot's own cache, emptied by `sandlot clean`), linked into the session's
    sandlot cache so the CLI finds it there."""
    keep = kept_downloads_dir()
    folder = asyncio.run(install_npm_package(keep, "pi", PACKAGE, DEFAULT_VERSION))
    link = cache_dir / "agents" / "pi" / DEFAULT_VERSION
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.exists():
        link.symlink_to(folder, target_is_directory=True)
    return cache_dir


def _cli(cache_dir: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SANDLOT_CACHE_DIR": str(cache_dir), "COLUMNS": "200",
           "PYTHONPATH": str(REPO / "tests")}
    return subprocess.run(sandlot_cmd(*args), capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=REPO)


def _pi_run(cache_dir: Path, tasks: Path, jobs: Path, model: str, *extra: str,
            ) -> subprocess.CompletedProcess[str]:
    return _cli(cache_dir, "run", str(tasks), "--agent", "pi", "--model", model,
                "--scripts-dir", str(SCRIPTS), "--jobs-dir", str(jobs), "--job-name", "j",
                *extra)


def _exchanges(trial: Path) -> list[dict]:
    lines = (trial / "trajectory" / "llm_trajectory.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def _user_texts(exchange: dict) -> list[str]:
    texts = []
    for message in exchange["request"]["messages"]:
        if message["role"] != "user":
            continue
        content = message["content"]
        if isinstance(content, str):
            texts.append(content)
        else:
            texts.append("".join(part.get("text", "") for part in content))
    return texts


def _pi_processes() -> str:
    found = subprocess.run(["pgrep", "-af", f"{INSTALL_MOUNT}/node_modules"],
                           capture_output=True, text=True)
    return found.stdout.strip()


def _answer_task(make_task, name: str, **kwargs: object) -> Path:
    return make_task(name, files={"tests/check.py": CHECK_PY}, test_sh=CHECK_SH, **kwargs)


@pytest.fixture(scope="module")
def example_trial(pi_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    jobs = tmp_path_factory.mktemp("pi-example")
    proc = _cli(pi_cache, "run", str(EXAMPLES), "-i", "csv-top-customers", "--agent", "pi",
                "--model", "scripted/solver", "--jobs-dir", str(jobs), "--job-name", "j")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return jobs / "j" / "csv-top-customers__1"


def test_an_example_task_passes_with_pi(example_trial: Path):
    result = json.loads((example_trial / "result.json").read_text())
    assert result["passed"] and result["error"] is None, result
    info = result["agent_info"]
    assert info["done_reason"] == "stop" and info["turns"] == 4 and info["tool_calls"] == 3
    assert set(info["tools_used"]) == {"bash", "write"}
    assert info["agent_version"] == DEFAULT_VERSION
    assert "top_customers.sh" in info["final_response"]
    assert info["ttft_sec"] is not None and info["generation_sec"] > 0
    trace = json.loads((example_trial / "agent" / "pi_trace.json").read_text())
    (prompt,) = trace["prompts"]
    assert [t["name"] for t in prompt["tool_trace"]] == ["bash", "write", "bash"]
    assert all(t["finished"] and not t["is_error"] for t in prompt["tool_trace"])
    assert prompt["thinking"] and "CSV layout" in prompt["thinking"][0]
    events = (example_trial / "agent" / "pi_events.jsonl").read_text().splitlines()
    assert any(json.loads(line).get("type") == "agent_end" for line in events)
    assert not _pi_processes()


def test_token_counts_match_the_gateway_and_pi_self_report_sits_beside_them(
        example_trial: Path):
    result = json.loads((example_trial / "result.json").read_text())
    exchanges = _exchanges(example_trial)
    usage = result["usage"]
    assert usage["source"] == "gateway" and usage["n_requests"] == len(exchanges) == 4
    for key in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
        assert usage[key] == sum(e["usage"][key] for e in exchanges), key
    reported = result["agent_info"]["self_reported_usage"]
    assert reported["source"] == "pi"
    # Pi read the same counts off the stream: its report agrees, and is kept apart.
    for key in ("input_tokens", "output_tokens", "cache_read_tokens"):
        assert reported[key] == usage[key], key


def test_pi_on_a_ray_node_gets_the_same_result_and_counts(pi_cache: Path, example_trial: Path,
                                                           tmp_path: Path):
    """--ray local: Pi runs in the node's sandbox and talks to the node's gateway; what
    comes back to the driver's job folder is what a local run records."""
    proc = _cli(pi_cache, "run", str(EXAMPLES), "-i", "csv-top-customers", "--agent", "pi",
                "--model", "scripted/solver", "--ray", "local", "--jobs-dir", str(tmp_path),
                "--job-name", "j")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trial = tmp_path / "j" / "csv-top-customers__1"
    on_ray = json.loads((trial / "result.json").read_text())
    here = json.loads((example_trial / "result.json").read_text())
    assert on_ray["passed"] and on_ray["error"] is None, on_ray
    for key in ("input_tokens", "output_tokens", "total_tokens", "n_requests", "cost_usd"):
        assert on_ray["usage"][key] == here["usage"][key], key
    assert on_ray["agent_info"]["tool_calls"] == here["agent_info"]["tool_calls"]
    assert len(_exchanges(trial)) == 4
    assert (trial / "agent" / "pi_trace.json").is_file()
    assert not _pi_processes()


def test_pi_on_two_cluster_nodes_records_what_it_records_locally(pi_cache: Path,
                                                                 example_trial: Path,
                                                                 tmp_path: Path):
    """A head and two worker nodes: two attempts of the task, one on each node (a slot
    each), each trial with the token counts and tool calls of the local run."""
    from ray_support import two_node_cluster

    with two_node_cluster() as cluster:
        proc = _cli(pi_cache, "run", str(EXAMPLES), "-i", "csv-top-customers", "-k", "2",
                    "--agent", "pi", "--model", "scripted/solver", "--ray", cluster.address,
                    "--jobs-dir", str(tmp_path), "--job-name", "j")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    here = json.loads((example_trial / "result.json").read_text())
    nodes = set()
    for attempt in (1, 2):
        trial = tmp_path / "j" / f"csv-top-customers__{attempt}"
        result = json.loads((trial / "result.json").read_text())
        assert result["passed"] and result["error"] is None, result
        for key in ("input_tokens", "output_tokens", "n_requests", "cost_usd"):
            assert result["usage"][key] == here["usage"][key], key
        assert result["agent_info"]["tool_calls"] == here["agent_info"]["tool_calls"]
        assert len(_exchanges(trial)) == 4
        nodes.add(result["node"])
    assert len(nodes) == 2, nodes
    assert not _pi_processes()


AS_USER_TOML = '[agent]\ntimeout_sec = 120\nuser = "agent"\n'
AS_USER_DOCKERFILE = "FROM debian:bookworm-slim\nWORKDIR /app\nRUN chmod 1777 /app\n"


def test_pi_runs_as_the_user_the_task_names(pi_cache, make_task, tmp_path):
    """[agent] user = "agent" (not in the image: sandlot adds it): Pi and its commands run
    as that user, with its HOME; its config folder was handed over to it."""
    _answer_task(make_task, "as-user", task_toml=AS_USER_TOML, dockerfile=AS_USER_DOCKERFILE)
    proc = _pi_run(pi_cache, tmp_path / "tasks", tmp_path / "jobs", "scripted/pi-as-user")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trial = tmp_path / "jobs" / "j" / "as-user__1"
    result = json.loads((trial / "result.json").read_text())
    assert result["passed"], result
    diff = (trial / "agent" / "workspace.diff").read_text()
    assert "+agent" in diff and "+/home/agent" in diff, diff
    assert "added user agent" in (trial / "trial.log").read_text()


def test_a_failed_first_attempt_is_repaired_through_pi(pi_cache, make_task, tmp_path):
    _answer_task(make_task, "answer")
    proc = _pi_run(pi_cache, tmp_path / "tasks", tmp_path / "jobs", "scripted/pi-repair",
                   "--repair-attempts", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trial = tmp_path / "jobs" / "j" / "answer__1"
    result = json.loads((trial / "result.json").read_text())
    assert result["passed"] and result["repaired"] and result["counted_attempt"] == 2
    first, second = result["attempts"]
    assert first["evaluation"]["reward"] == 0.0
    assert first["generation"]["done_reason"] == "stop"
    feedback = second["feedback"]
    assert "not complete yet" in feedback and "wrong number" in feedback
    assert second["generation"]["final_response"] == "Fixed the answer."
    # The feedback went into the same Pi session: the model saw it as a user message,
    # after the whole first conversation.
    exchanges = _exchanges(trial)
    assert len(exchanges) == 4
    last_users = _user_texts(exchanges[-1])
    assert feedback in last_users and len(last_users) == 2
    trace = json.loads((trial / "agent" / "pi_trace.json").read_text())
    assert [p["message"] for p in trace["prompts"]][1] == feedback
    assert not _pi_processes()


def test_a_stalled_model_hits_the_agent_timeout_with_partial_usage(pi_cache, make_task,
                                                                    tmp_path):
    _answer_task(make_task, "stall", agent_timeout=8)
    proc = _pi_run(pi_cache, tmp_path / "tasks", tmp_path / "jobs", "scripted/pi-stall")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trial = tmp_path / "jobs" / "j" / "stall__1"
    result = json.loads((trial / "result.json").read_text())
    assert result["error"]["kind"] == "agent_timeout", result["error"]
    assert "1 tool calls" in result["error"]["message"]
    # What was done before the stall is kept: the gateway's counts and Pi's trace.
    assert result["usage"]["n_requests"] >= 1 and result["usage"]["input_tokens"] >= 1000
    trace = json.loads((trial / "agent" / "pi_trace.json").read_text())
    (prompt,) = trace["prompts"]
    assert prompt["done_reason"] == "timeout"
    assert [t["name"] for t in prompt["tool_trace"]] == ["bash"]
    assert result["timing"]["agent"] < 8 + 20
    assert not _pi_processes()


def test_a_burst_of_500s_is_retried_by_the_gateway(pi_cache, make_task, tmp_path):
    _answer_task(make_task, "burst")
    proc = _pi_run(pi_cache, tmp_path / "tasks", tmp_path / "jobs", "scripted/pi-burst")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trial = tmp_path / "jobs" / "j" / "burst__1"
    result = json.loads((trial / "result.json").read_text())
    assert result["passed"], result
    first = _exchanges(trial)[0]
    assert first["attempts"] == 3 and len(first["retried_errors"]) == 2
    assert result["agent_info"]["done_reason"] == "stop"


def test_a_model_that_stays_down_ends_as_agent_error_without_pi_retrying(
        pi_cache, make_task, tmp_path):
    _answer_task(make_task, "down")
    proc = _pi_run(pi_cache, tmp_path / "tasks", tmp_path / "jobs", "scripted/pi-down")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trial = tmp_path / "jobs" / "j" / "down__1"
    result = json.loads((trial / "result.json").read_text())
    assert result["error"]["kind"] == "agent_error"
    assert "503" in result["error"]["message"]
    # Retries happen once, in the gateway: Pi (and its SDK) sent the request only once.
    (exchange,) = _exchanges(trial)
    assert exchange["status"] == 503 and exchange["attempts"] == 5
    trace = json.loads((trial / "agent" / "pi_trace.json").read_text())
    assert trace["prompts"][0]["done_reason"] == "error"
    assert trace["prompts"][0]["auto_retries"] == 0
    assert not _pi_processes()


def test_a_model_that_never_stops_is_cut_at_the_trial_budget(pi_cache, make_task, tmp_path):
    _answer_task(make_task, "spend")
    proc = _pi_run(pi_cache, tmp_path / "tasks", tmp_path / "jobs", "scripted/runaway",
                   "--max-trial-tokens", "10000")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trial = tmp_path / "jobs" / "j" / "spend__1"
    result = json.loads((trial / "result.json").read_text())
    assert result["error"]["kind"] == "budget_exceeded", result["error"]
    assert result["error"]["caused_by"] == "agent"
    assert "this trial's budget (10,000 tokens) was reached" in result["error"]["message"]
    # runaway spends 2,500 tokens a turn: four are answered, the fifth is refused.
    assert result["usage"]["total_tokens"] == 10000
    statuses = [e["status"] for e in _exchanges(trial)]
    assert statuses[:4] == [200] * 4 and set(statuses[4:]) == {402}, statuses
    assert result["reward"] == 0.0  # scored on what Pi left: a failure, not an error
    summary = json.loads((tmp_path / "jobs" / "j" / "summary.json").read_text())
    assert summary["n_failed"] == 1 and summary["n_errored"] == 0
    assert summary["n_budget_exceeded"] == 1
    assert not _pi_processes()


def test_generation_flags_reach_the_model_in_every_pi_request(pi_cache, tmp_path):
    proc = _cli(pi_cache, "run", str(EXAMPLES), "-i", "csv-top-customers", "--agent", "pi",
                "--model", "scripted/solver", "--temperature", "0.3", "--seed", "5",
                "--max-output-tokens", "3000", "--model-kwarg", "top_p=0.5",
                "--jobs-dir", str(tmp_path), "--job-name", "j")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trial = tmp_path / "j" / "csv-top-customers__1"
    result = json.loads((trial / "result.json").read_text())
    assert result["passed"], result
    exchanges = _exchanges(trial)
    assert exchanges
    for exchange in exchanges:
        request = exchange["request"]
        assert request["temperature"] == 0.3 and request["seed"] == 5
        assert request["top_p"] == 0.5
        assert 3000 in (request.get("max_tokens"), request.get("max_completion_tokens"))
    generation = result["generation"]
    assert generation["n_requests_changed"] == len(exchanges)
    # What Pi itself asked for is kept beside what was sent.
    assert "max_output_tokens" in generation["agent_sent"], generation
