"""Which network each phase gets (Harbor 0.26's rules), the allowlist's entries as the
schema takes them, and names resolved to the ranges the egress filter allows."""

from __future__ import annotations

import asyncio
import tomllib

import pytest

from sandlot.network_plan import allowlist_of, log_lines, plan_networks, resolve_names
from sandlot.sandbox.base import Allowlist
from sandlot.tasks import TaskConfig, check_task
from sandlot.tasks.network import phase_policy

pytestmark = pytest.mark.timeout(60)


def config(text: str) -> TaskConfig:
    return TaskConfig.model_validate(tomllib.loads(text))


@pytest.mark.parametrize(("toml", "agent", "verifier"), [
    ("", "none", "public"),  # sandlot's agent default; Harbor's verifier default
    ('[environment]\nnetwork_mode = "public"\n', "public", "public"),
    ('[environment]\nnetwork_mode = "no-network"\n', "none", "none"),
    ("[environment]\nallow_internet = false\n", "none", "none"),
    ('[environment]\nnetwork_mode = "no-network"\n[verifier]\nnetwork_mode = "public"\n',
     "none", "public"),
    ('[environment]\nnetwork_mode = "public"\n[agent]\nnetwork_mode = "no-network"\n',
     "none", "public"),
    ('[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["a.example"]\n',
     "allowlist", "allowlist"),
])
def test_a_phase_has_its_own_network_else_the_environments(toml: str, agent: str,
                                                           verifier: str) -> None:
    parsed = config(toml)
    assert phase_policy(parsed, "agent").mode == agent
    assert phase_policy(parsed, "verifier").mode == verifier


def test_a_steps_own_network_wins_over_the_tasks() -> None:
    parsed = config('[agent]\nnetwork_mode = "public"\n'
                    '[[steps]]\nname = "one"\n'
                    '[[steps]]\nname = "two"\n[steps.agent]\nnetwork_mode = "allowlist"\n'
                    'allowed_hosts = ["b.example"]\n')
    one, two = parsed.steps or []
    assert phase_policy(parsed, "agent", one).mode == "public"
    policy = phase_policy(parsed, "agent", two)
    assert (policy.mode, policy.allowed_hosts) == ("allowlist", ("b.example",))
    assert "two" in policy.source


def test_allowed_hosts_are_normalized_as_harbor_does() -> None:
    parsed = config('[agent]\nnetwork_mode = "allowlist"\nallowed_hosts = ["Files.Example.ORG.",'
                    ' "2001:DB8::1", "10.1.0.0/16"]\n')
    assert parsed.agent.allowed_hosts == ["files.example.org", "2001:db8::1", "10.1.0.0/16"]


@pytest.mark.parametrize(("hosts", "needle"), [
    ('["https://files.example.org/x"]', "URL"),
    ('["files.example.org:443"]', "URL"),
    ('["a*.example.org"]', "leading"),
    ('["10.0.0.1/8"]', "CIDR"),
])
def test_a_bad_allowed_host_names_the_field_and_the_fix(make_task, hosts: str,
                                                         needle: str) -> None:
    toml = f'[agent]\nnetwork_mode = "allowlist"\nallowed_hosts = {hosts}\n'
    problems = [p for p in check_task(make_task("hosts", task_toml=toml))
                if p.severity == "error"]
    assert len(problems) == 1
    assert "agent.allowed_hosts" in problems[0].field
    assert needle in problems[0].message


def test_allowed_hosts_without_an_allowlist_is_refused(make_task) -> None:
    toml = '[verifier]\nnetwork_mode = "public"\nallowed_hosts = ["a.example"]\n'
    [problem] = [p for p in check_task(make_task("hosts", task_toml=toml))
                 if p.severity == "error"]
    assert "allowlist" in problem.message and problem.field.startswith("verifier")


def test_names_resolve_once_and_a_name_that_does_not_allows_nothing() -> None:
    calls: list[str] = []

    async def resolver(name: str) -> list[str]:
        calls.append(name)
        if name == "gone.example":
            raise OSError("no such name")
        if name == "slow.example":
            await asyncio.sleep(5)
        return {"a.example": ["198.51.100.10", "2001:db8::10"]}.get(name, [])

    resolved = asyncio.run(resolve_names(["a.example", "a.example", "gone.example",
                                          "slow.example"], resolver, timeout_sec=0.2))
    assert sorted(calls) == ["a.example", "gone.example", "slow.example"]
    assert resolved == {"a.example": ["198.51.100.10", "2001:db8::10"], "gone.example": [],
                        "slow.example": []}
    allow = allowlist_of(["a.example", "gone.example", "203.0.113.0/24", "192.0.2.7"],
                         resolved)
    assert allow == Allowlist(("192.0.2.7/32", "198.51.100.10/32", "2001:db8::10/128",
                               "203.0.113.0/24"))


def test_the_trial_plan_gives_each_phase_its_network_and_records_it() -> None:
    async def resolver(name: str) -> list[str]:
        return {"a.example": ["198.51.100.10"]}.get(name, [])

    parsed = config('[agent]\nnetwork_mode = "allowlist"\n'
                    'allowed_hosts = ["a.example", "none.example"]\n'
                    '[verifier]\nnetwork_mode = "no-network"\n')
    plan = asyncio.run(plan_networks(parsed, uses_gateway=True, resolver=resolver))
    assert plan.agent.network == Allowlist(("198.51.100.10/32",))
    assert plan.verifier.network == "none"
    record = plan.as_dict()
    assert record["agent"] == {"mode": "allowlist", "source": "[agent] network_mode",
                               "allowed_hosts": ["a.example", "none.example"],
                               "resolved": {"a.example": ["198.51.100.10"],
                                            "none.example": []}}
    assert any("none.example did not resolve" in line for line in log_lines(plan))
    # --agent-network wins over the task, and is what the record says.
    forced = asyncio.run(plan_networks(parsed, uses_gateway=True, agent_override="none",
                                       resolver=resolver))
    assert forced.agent.network == "loopback"
    assert forced.as_dict()["agent"] == {"mode": "none", "source": "--agent-network none"}
