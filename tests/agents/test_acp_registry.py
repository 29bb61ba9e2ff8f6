"""The ACP agent registry: built-in entries, `acp:<command>`, agents files, the listing."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from sandlot.agents import UnknownAgentError, create_agent
from sandlot.agents import acp_registry as registry
from sandlot.agents.acp import AcpAgent
from sandlot.agents.acp_registry import (
    AgentSpecError,
    command_spec,
    fill,
    get_spec,
    load_agents_file,
)
from sandlot.agents.install import MARKER


def test_every_builtin_agent_is_pinned_and_says_what_it_needs():
    for name, spec in registry.BUILTIN_SPECS.items():
        assert spec.name == name
        if spec.npm:
            assert spec.version and spec.version[0].isdigit(), name
        else:
            assert spec.install_hint, name
        assert spec.needs(), name
    assert registry.BUILTIN_SPECS["claude"].wire_api == "messages"
    assert registry.BUILTIN_SPECS["codex"].wire_api == "responses"


def test_placeholders_are_filled_and_other_braces_kept():
    values = {"gateway": "http://127.0.0.1:5", "model": "scripted/x", "api_key": "k"}
    codex_provider = registry.BUILTIN_SPECS["codex"].command[5]
    assert fill(codex_provider, values) == (
        'model_providers.sandlot={name="sandlot",base_url="http://127.0.0.1:5/v1",'
        'env_key="SANDLOT_GATEWAY_KEY",wire_api="responses"}')
    assert fill('{"a": {unknown}} {model}', values) == '{"a": {unknown}} scripted/x'


def test_an_agent_the_gateway_cannot_serve_fails_once_before_any_trial(tmp_path: Path,
                                                                        monkeypatch):
    monkeypatch.setattr(registry, "UNSERVED_WIRE_APIS", {"converse": "AWS Bedrock Converse"})
    spec = dataclasses.replace(registry.BUILTIN_SPECS["gemini"], wire_api="converse")
    assert "Converse" in (spec.unsupported_reason() or "")
    agent = AcpAgent("scripted/solver", agent="gemini", spec=spec)
    with pytest.raises(ValueError, match="does not serve"):
        asyncio.run(agent.prepare(tmp_path, None))
    # gemini itself is served now (Google's generateContent).
    assert registry.BUILTIN_SPECS["gemini"].unsupported_reason() is None


@pytest.mark.parametrize(("text", "problem"), [
    ("acp:", "needs a command"),
    ("acp:   ", "needs a command"),
    ('acp:my-agent "unclosed', "cannot parse"),
])
def test_bad_acp_commands_are_refused_with_advice(text, problem):
    with pytest.raises(AgentSpecError, match=problem):
        command_spec(text)
    with pytest.raises(UnknownAgentError, match=problem):
        create_agent(text, "scripted/x")


def test_an_agents_file_registers_agents_by_name(tmp_path: Path, monkeypatch):
    path = tmp_path / "agents.toml"
    path.write_text('''
[agents.mine]
description = "mine"
command = "my-agent --acp"
npm = "my-agent-cli"
version = "1.2.3"
env = { MY_URL = "{gateway}/v1" }
wire_api = "chat"
needs_node = "20.6"
permission = "reject"
handshake_timeout_sec = 5
''')
    specs = load_agents_file(path)
    mine = specs["mine"]
    assert mine.command == ("my-agent", "--acp") and mine.needs_node == (20, 6)
    assert mine.permission == "reject" and mine.handshake_timeout_sec == 5
    assert mine.source == "file"
    # An explicit file (--agents-file) reaches the agent through the run's catalog...
    monkeypatch.delenv(registry.AGENTS_FILE_ENV, raising=False)
    catalog = registry.AgentCatalog.load(path)
    agent = create_agent("mine", "scripted/x", catalog)
    assert isinstance(agent, AcpAgent) and agent.spec.env == {"MY_URL": "{gateway}/v1"}
    # ...and nowhere else: no process-wide table remembers it.
    with pytest.raises(UnknownAgentError, match="unknown agent 'mine'"):
        create_agent("mine", "scripted/x")
    monkeypatch.setenv(registry.AGENTS_FILE_ENV, str(path))
    assert isinstance(create_agent("mine", "scripted/x"), AcpAgent)
    rows = {r["name"]: r for r in catalog.rows(tmp_path)}
    assert rows["mine"]["source"] == "file" and rows["mine"]["installed"] is False
    assert "node >= 20.6" in str(rows["mine"]["needs"])


@pytest.mark.parametrize(("body", "problem"), [
    ("[agents.x]\ncommand = []\n", "needs command"),
    ('[agents.x]\ncommand = ["a"]\nwire_api = "grpc"\n', "wire_api"),
    ('[agents.x]\ncommand = ["a"]\npermission = "maybe"\n', "permission"),
    ('[agents.x]\ncommand = ["a"]\nnpm = "pkg"\n', "pinned version"),
    ('[agents.x]\ncommand = ["a"]\ncolour = "red"\n', "unknown key"),
    ("title = 1\n", "no agents"),
])
def test_a_bad_agents_file_names_the_problem(tmp_path: Path, body, problem):
    path = tmp_path / "agents.toml"
    path.write_text(body)
    with pytest.raises(AgentSpecError, match=problem):
        load_agents_file(path)


def test_the_listing_shows_versions_installs_and_needs(tmp_path: Path):
    folder = tmp_path / "agents" / "codex" / "0.16.0"
    folder.mkdir(parents=True)
    (folder / MARKER).write_text("{}")
    rows = {r["name"]: r for r in registry.AgentCatalog.load(environ={}).rows(tmp_path)}
    assert {"claude", "codex", "gemini", "opencode", "goose"} <= set(rows)
    assert rows["codex"]["installed"] is True and rows["claude"]["installed"] is False
    assert rows["goose"]["installed"] is None and "PATH" in str(rows["goose"]["needs"])
    assert rows["gemini"]["runnable"] is True
    assert "generateContent" in str(rows["gemini"]["needs"])
    assert "Responses" in str(rows["codex"]["needs"])
    assert get_spec("claude").version == rows["claude"]["version"]


def test_an_explicit_agents_file_wins_over_the_environment_one(tmp_path: Path):
    env_file, explicit = tmp_path / "env.toml", tmp_path / "explicit.toml"
    env_file.write_text('[agents.mine]\ncommand = "from-env"\n')
    explicit.write_text('[agents.mine]\ncommand = "from-flag"\n')
    catalog = registry.AgentCatalog.load(explicit,
                                         environ={registry.AGENTS_FILE_ENV: str(env_file)})
    assert catalog.get_spec("mine").command == ("from-flag",)
    assert registry.AgentCatalog.load(
        environ={registry.AGENTS_FILE_ENV: str(env_file)}).get_spec("mine").command == (
        "from-env",)
