"""sandlot's ACP client against a small ACP agent written for the tests (stdlib only,
tests/agents/scripts_acp/probe_agent.py), run as `acp:<command>` inside a real local
sandbox: every client-side method (fs, terminal, permission), the handshake (auth, model
option, env, cwd), the counters, the trajectory, and every way of ending (done, timeout,
crash, handshake that never completes) with no process left behind."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import write_task
from sandlot.agents import acp_client as acp_client_module
from sandlot.agents import create_agent, resolve_agent_path
from sandlot.agents.acp import AcpAgent
from sandlot.agents.acp_registry import command_spec
from sandlot.agents.base import AgentContext, GatewayAccess
from sandlot.errors import AGENT_FAULT_KINDS, ErrorKind, SandboxError, TrialError
from sandlot.live import AgentLive
from sandlot.sandbox.base import EnvironmentRequest, Sandbox, SandboxSpec
from sandlot.sandbox.local_backend import LocalBackend, check_local_backend
from sandlot.tasks.loader import load_task

pytestmark = [pytest.mark.e2e]

PROBE = Path(__file__).parent / "scripts_acp" / "probe_agent.py"
PROBE_IN = "/opt/probe/probe_agent.py"
RESULTS = "/tmp/probe-results.json"


@pytest.fixture
def run() -> Iterator[Any]:
    with asyncio.Runner() as runner:
        yield runner.run


@pytest.fixture
def env(run, tmp_path: Path, cache_dir: Path) -> Iterator[dict[str, Any]]:
    """A started local sandbox with the probe agent in it, and a task around it."""
    try:
        check_local_backend()
    except SandboxError as exc:
        pytest.skip(f"local sandbox cannot run here: {exc}")
    task_dir = write_task(tmp_path / "tasks", "probe",
                          files={"environment/data.txt": "line one\nline two\nline three\n"},
                          dockerfile="FROM debian:bookworm-slim\nWORKDIR /app\n"
                                     "COPY data.txt /app/data.txt\n")
    task = load_task(task_dir)
    request = EnvironmentRequest(spec=SandboxSpec(name=f"probe-{tmp_path.name}", workdir="/app"),
                                 environment_dir=task.environment_dir, digest=task.digest,
                                 build_timeout_sec=120, log_dir=tmp_path / "setup")
    sandbox = run(LocalBackend(cache_dir, image_policy="host").create(request))
    run(sandbox.upload(PROBE, PROBE_IN))
    trial = tmp_path / "trial"
    (trial / "agent").mkdir(parents=True)
    yield {"sandbox": sandbox, "task": task, "trial": trial}
    run(sandbox.stop())


def _ctx(env: dict[str, Any], timeout_sec: float = 30, **kwargs: Any) -> AgentContext:
    return AgentContext(
        task=env["task"], sandbox=env["sandbox"], timeout_sec=timeout_sec, network="none",
        logs_dir=env["trial"] / "agent", live=AgentLive(),
        gateway=GatewayAccess(sandbox_base_url="http://127.0.0.1:9",
                              host_base_url="http://127.0.0.1:9", api_key="sk-probe-key",
                              model="scripted/probe"), **kwargs)


def _agent(*flags: str, **spec_changes: Any) -> AcpAgent:
    spec = command_spec(f"acp:python3 {PROBE_IN} {' '.join(flags)}")
    if spec_changes:
        spec = dataclasses.replace(spec, **spec_changes)
    return AcpAgent(model="scripted/probe", spec=spec)


def _prompt(steps: list[dict[str, Any]]) -> str:
    return json.dumps({"results": RESULTS, "steps": steps})


async def _cat(sandbox: Sandbox, path: str) -> str:
    result = await sandbox.exec(["cat", path])
    assert result.exit_code == 0, result.stderr
    return result.stdout


async def _session(env: dict[str, Any], agent: AcpAgent, steps: list[dict[str, Any]],
                   ctx: AgentContext | None = None) -> list[Any]:
    """Start the probe, send one prompt of `steps`, close, return the probe's results."""
    ctx = ctx or _ctx(env)
    await agent.setup(ctx)
    try:
        await agent._start(ctx)
        await agent._prompt(ctx, _prompt(steps))
    finally:
        await agent.close(ctx)
    return json.loads(await _cat(env["sandbox"], RESULTS))


def _trajectory(env: dict[str, Any]) -> list[dict[str, Any]]:
    path = env["trial"] / "trajectory" / "acp_trajectory.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _no_probe_left() -> bool:
    found = subprocess.run(["pgrep", "-f", PROBE_IN], capture_output=True, text=True)
    return not found.stdout.strip()


# -- names ------------------------------------------------------------------------------


def test_acp_names_resolve_to_the_acp_agent_before_module_class():
    assert resolve_agent_path("claude") == "sandlot.agents.acp:AcpAgent"
    assert resolve_agent_path('acp:my-agent --acp') == "sandlot.agents.acp:AcpAgent"
    assert resolve_agent_path("mypkg.mod:Agent") == "mypkg.mod:Agent"
    agent = create_agent('acp:"/opt/my agent/bin" --stdio', "scripted/x")
    assert isinstance(agent, AcpAgent)
    assert agent.spec.command == ("/opt/my agent/bin", "--stdio")
    assert agent.spec.env["OPENAI_BASE_URL"] == "{gateway}/v1"


def test_a_handshake_timeout_is_its_own_kind_and_not_the_agents_result():
    # The agent never saw the task: nothing of its to score (see errors.py).
    assert ErrorKind.AGENT_HANDSHAKE_TIMEOUT not in AGENT_FAULT_KINDS


# -- fs ---------------------------------------------------------------------------------


def test_fs_reads_whole_files_line_ranges_and_relative_paths_inside_the_sandbox(env, run):
    results = run(_session(env, _agent(), [
        {"do": "read", "path": "/app/data.txt"},
        {"do": "read", "path": "/app/data.txt", "line": 2, "limit": 1},
        {"do": "read", "path": "/app/data.txt", "line": 2},
        {"do": "read", "path": "data.txt", "limit": 1},
        {"do": "read", "path": "/app/missing.txt"},
        {"do": "read", "path": "/work/main/pyproject.toml"},  # a host file: not inside
    ]))
    whole, ranged, from_two, relative, missing, host = results
    assert whole["result"]["content"] == "line one\nline two\nline three\n"
    assert ranged["result"]["content"] == "line two\n"
    assert from_two["result"]["content"] == "line two\nline three\n"
    assert relative["result"]["content"] == "line one\n"
    assert missing["error"]["code"] == -32002
    assert missing["error"]["data"] == {"uri": "/app/missing.txt"}
    assert host["error"]["code"] == -32002


def test_fs_read_refuses_a_file_over_the_read_limit(env, run, monkeypatch):
    monkeypatch.setattr(acp_client_module, "MAX_READ_BYTES", 10)
    (big,) = run(_session(env, _agent(), [{"do": "read", "path": "/app/data.txt"}]))
    assert big["error"]["code"] == -32603
    assert "larger than 10 bytes" in big["error"]["data"]["details"]


def test_fs_writes_create_folders_overwrite_and_stay_in_the_sandbox(env, run):
    sandbox = env["sandbox"]
    results = run(_session(env, _agent(), [
        {"do": "write", "path": "/app/new/deep/file.txt", "content": "héllo\n"},
        {"do": "write", "path": "/app/data.txt", "content": "replaced"},
        {"do": "write", "path": "rel.txt", "content": "relative\n"},
        {"do": "write", "path": "/proc/version", "content": "no"},
    ]))
    assert results[0] == {"result": {}} and results[1] == {"result": {}}
    assert results[3]["error"]["code"] == -32603
    assert run(_cat(sandbox, "/app/new/deep/file.txt")) == "héllo\n"
    assert run(_cat(sandbox, "/app/data.txt")) == "replaced"
    assert run(_cat(sandbox, "/app/rel.txt")) == "relative\n"
    assert not Path("/app/new/deep/file.txt").exists()


# -- terminals --------------------------------------------------------------------------


def test_terminals_run_inside_the_sandbox_with_args_env_cwd_and_exit_codes(env, run):
    results = run(_session(env, _agent(), [
        {"do": "terminal", "command": "echo", "args": ["a b", "$HOME"]},
        {"do": "terminal", "command": "echo out; echo err >&2; hostname; exit 7"},
        {"do": "terminal", "command": "printf %s \"$PROBE_VAR\"; pwd",
         "env": {"PROBE_VAR": "from-env"}, "cwd": "/tmp"},
        {"do": "terminal", "command": "test -e /work/main && echo host-visible || echo hidden"},
    ]))
    args, shell, with_env, isolated = results
    assert args["output"]["result"]["output"] == "a b $HOME\n"  # argv: no shell expansion
    assert args["wait"]["result"] == {"exitCode": 0}
    assert shell["wait"]["result"] == {"exitCode": 7}
    out = shell["output"]["result"]
    assert out["exitStatus"] == {"exitCode": 7}
    assert "out\n" in out["output"] and "err\n" in out["output"] and "sandbox\n" in out["output"]
    assert with_env["output"]["result"]["output"] == "from-env/tmp\n"
    assert isolated["output"]["result"]["output"] == "hidden\n"
    for record in results:  # released: the id is gone afterwards
        assert record["release"] == {"result": {}}
        assert record["after_release"]["error"]["code"] == -32602


def test_terminal_output_keeps_the_tail_within_the_limit_on_a_character_boundary(env, run):
    (record,) = run(_session(env, _agent(), [
        {"do": "terminal", "command": "printf 'start'; for i in $(seq 1 300); do printf 'é'; done;"
                                      " printf 'END'", "limit": 100}]))
    out = record["output"]["result"]
    assert out["truncated"] is True
    assert out["output"].endswith("END") and "start" not in out["output"]
    assert len(out["output"].encode()) <= 100
    assert set(out["output"][:-3]) == {"é"}  # no broken character at the cut


def test_a_terminal_can_be_read_while_running_and_killed(env, run):
    (record,) = run(_session(env, _agent(), [
        {"do": "terminal", "command": "echo started; sleep 30", "output": True,
         "sleep_before_output": 0.5, "kill": True}]))
    early = record["output_early"]["result"]
    assert early["output"] == "started\n" and "exitStatus" not in early
    assert record["kill"] == {"result": {}}
    assert record["wait"]["result"]["signal"] == "SIGKILL"
    assert record["wait"]["result"].get("exitCode") is None


def test_terminals_left_running_are_killed_when_the_session_closes(env, run, tmp_path):
    marker = f"probe-left-running-{tmp_path.name}"
    (record,) = run(_session(env, _agent(), [
        {"do": "terminal", "command": f"sleep 300; : {marker}", "wait": False,
         "release": False}]))
    assert "terminalId" in record["create"]["result"]
    found = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    assert not found.stdout.strip()
    assert _no_probe_left()


# -- permissions ------------------------------------------------------------------------


@pytest.mark.parametrize(("policy", "answer"), [
    ("allow", {"outcome": "selected", "optionId": "yes-always"}),
    ("allow_once", {"outcome": "selected", "optionId": "yes"}),
    ("reject", {"outcome": "selected", "optionId": "no"}),
])
def test_permission_requests_follow_the_policy(env, run, policy, answer):
    agent = _agent()
    agent.permission = policy
    (result,) = run(_session(env, agent, [{"do": "permission", "title": "rm -rf /app"}]))
    assert result["result"]["outcome"] == answer
    assert agent.counters.permission_requests == 1
    assert agent.counters.permissions_denied == (1 if policy == "reject" else 0)


def test_reject_without_a_reject_option_cancels_and_a_task_policy_wins(env, run):
    env["task"].config.agent.acp_permission = "reject"
    agent = _agent()
    agent.permission = "allow"  # the run says allow; the task says reject
    (result,) = run(_session(env, agent, [{"do": "permission", "options": [
        {"optionId": "ok", "name": "OK", "kind": "allow_once"}]}]))
    assert result["result"]["outcome"] == {"outcome": "cancelled"}


# -- handshake --------------------------------------------------------------------------


def test_handshake_authenticates_when_asked_selects_the_model_and_passes_the_gateway(env, run):
    agent = _agent("--auth-required", "--model-option")
    run(_session(env, agent, [{"do": "say", "text": "hi"}]))
    sandbox = env["sandbox"]
    assert run(_cat(sandbox, "/tmp/probe-auth.txt")) == "api-key"
    assert run(_cat(sandbox, "/tmp/probe-model.txt")) == "scripted/probe"
    seen = json.loads(run(_cat(sandbox, "/tmp/probe-env.json")))
    assert seen["cwd"] == "/app"
    assert seen["env"]["OPENAI_BASE_URL"] == "http://127.0.0.1:9/v1"
    assert seen["env"]["OPENAI_API_KEY"] == "sk-probe-key"
    assert seen["env"]["SANDLOT_MODEL"] == "scripted/probe"
    assert agent.handshake["auth_method"] == "api-key"
    assert agent.handshake["model_selection"] == "set config option 'model'"
    assert agent.handshake["agent_name"] == "probe"


def test_an_agent_that_never_answers_the_handshake_gets_its_own_error(env, run):
    agent = _agent("--hang-initialize", "--no-exit-on-eof", handshake_timeout_sec=2)
    ctx = _ctx(env)
    run(agent.setup(ctx))
    with pytest.raises(TrialError) as caught:
        run(agent.run(ctx))
    assert caught.value.kind is ErrorKind.AGENT_HANDSHAKE_TIMEOUT
    assert "within 2s" in caught.value.message
    run(agent.close(ctx))
    assert _no_probe_left()


def test_an_agent_that_crashes_on_start_is_an_agent_error_with_its_stderr(env, run):
    agent = _agent("--crash-on-start")
    ctx = _ctx(env)
    run(agent.setup(ctx))
    with pytest.raises(TrialError) as caught:
        run(agent.run(ctx))
    assert caught.value.kind is ErrorKind.AGENT_ERROR
    assert "exited (code 3) during the handshake" in caught.value.message
    assert "missing configuration PROBE_CONFIG" in caught.value.message
    assert "missing configuration" in (env["trial"] / "agent" / "acp_stderr.log").read_text()
    assert _no_probe_left()


# -- the session ------------------------------------------------------------------------


def test_updates_feed_counters_live_state_and_the_trajectory(env, run):
    agent = _agent()
    ctx = _ctx(env)
    run(_session(env, agent, [
        {"do": "tool", "id": "t1", "title": "Read file", "kind": "read"},
        {"do": "tool", "id": "t1", "title": "Read file", "update": "tool_call_update",
         "status": "completed"},
        {"do": "tool", "id": "t2", "title": "Run tests", "kind": "execute"},
        {"do": "tool", "id": "t3", "title": "Run tests", "kind": "execute"},
        {"do": "think", "text": "hmm"},
        {"do": "say", "text": "first part"},
        {"do": "big", "bytes": 300_000},  # one JSON line far over 64 KiB
        {"do": "tool", "id": "t4", "title": "Edit", "kind": "edit"},
        {"do": "say", "text": "All "}, {"do": "say", "text": "done."},
        {"do": "usage_update", "used": 1200, "size": 100000},
        {"do": "garbage"}, {"do": "unknown_update"},
        {"do": "usage", "input": 900, "output": 100},
    ], ctx))
    c = agent.counters
    assert (c.tool_calls, c.distinct_tool_titles, c.last_tool_title) == (4, 3, "Edit")
    assert (c.message_chunks, c.thought_chunks) == (4, 1)
    assert (c.context_used, c.context_size, c.cost_amount) == (1200, 100000, 0.5)
    assert c.reported_tokens == 1000
    live = ctx.live
    assert live.tool_calls == 4 and live.last_tool == "Edit" and live.message_chunks == 5
    assert live.self_reported_tokens == 1000
    meta = agent._metadata(c.prompts[-1])
    assert meta["final_response"] == "All done."  # the text after the last tool call
    assert meta["tools_used"] == ["edit", "execute", "read"]
    assert meta["self_reported_usage"]["total_tokens"] == 1000
    assert meta["wire_problems"] == {"unparsed_lines": 1, "unknown_updates": 1}
    lines = _trajectory(env)
    assert lines[0]["type"] == "header" and lines[0]["schema_version"] == 1
    updates = [x for x in lines if x["type"] == "message"
               and x["message"].get("method") == "session/update"]
    assert len(updates) == c.updates == 12
    assert any(x["type"] == "event" and x["event"] == "not_json_rpc" for x in lines)
    assert lines[-1]["event"] == "agent_stopped"


def test_a_follow_up_goes_into_the_same_session(env, run):
    agent = _agent()
    ctx = _ctx(env)
    run(agent.setup(ctx))
    first = run(agent.run(ctx))
    second = run(agent.follow_up(ctx, "please fix it"))
    run(agent.close(ctx))
    run(agent.close(ctx))  # twice is fine
    prompts = [json.loads(line) for line in
               run(_cat(env["sandbox"], "/tmp/probe-prompts.txt")).splitlines()]
    assert [p["session"] for p in prompts] == ["probe-session-1"] * 2
    assert prompts[1]["text"] == "please fix it"
    assert first.metadata["prompt"] == 1 and second.metadata["prompt"] == 2
    assert second.metadata["final_response"] == "got: please fix it"
    assert _no_probe_left()


def test_a_stalled_prompt_is_cancelled_at_the_timeout_with_partial_counters(env, run):
    agent = _agent()
    ctx = _ctx(env, timeout_sec=2)
    run(agent.setup(ctx))
    run(agent._start(ctx))
    with pytest.raises(TrialError) as caught:
        run(agent._prompt(ctx, _prompt([
            {"do": "tool", "id": "t1", "title": "Look around"},
            {"do": "sleep", "seconds": 60}])))
    error = caught.value
    assert error.kind is ErrorKind.AGENT_TIMEOUT and "1 tool calls" in error.message
    assert error.details["tool_calls"] == 1 and error.details["done_reason"] == "timeout"
    sent = [x["message"].get("method") for x in _trajectory(env) if x["type"] == "message"
            and x["direction"] == "client_to_agent"]
    assert "session/cancel" in sent
    events = [x["event"] for x in _trajectory(env) if x["type"] == "event"]
    assert events[-3:] == ["timeout", "cancel_sent", "agent_stopped"]
    run(agent.close(ctx))
    assert _no_probe_left()


def test_an_agent_that_ignores_cancel_and_stdin_eof_is_still_stopped_in_bounded_time(env, run):
    agent = _agent("--ignore-cancel", "--no-exit-on-eof")
    ctx = _ctx(env, timeout_sec=1)
    run(agent.setup(ctx))
    run(agent._start(ctx))
    loop_time = asyncio.new_event_loop().time
    started = loop_time()
    with pytest.raises(TrialError):
        run(agent._prompt(ctx, _prompt([{"do": "sleep", "seconds": 60}])))
    # timeout 1 s + cancel wait 5 s + stdin grace 3 s + SIGTERM (the probe dies of it)
    assert loop_time() - started < 14
    assert _no_probe_left()


def test_an_agent_that_dies_mid_prompt_is_an_agent_error_with_stderr_and_counters(env, run):
    agent = _agent()
    ctx = _ctx(env)
    run(agent.setup(ctx))
    run(agent._start(ctx))
    with pytest.raises(TrialError) as caught:
        run(agent._prompt(ctx, _prompt([
            {"do": "tool", "id": "t1", "title": "Build"},
            {"do": "exit", "code": 9, "stderr": "probe: segfault-ish"}])))
    error = caught.value
    assert error.kind is ErrorKind.AGENT_ERROR
    assert "exited (code 9) while working" in error.message
    assert "segfault-ish" in error.message
    assert error.details["tool_calls"] == 1
    run(agent.close(ctx))
    assert _no_probe_left()
