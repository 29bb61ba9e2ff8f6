"""Generation settings written into every request by the gateway, in each wire format's own
field: a flag given wins over the agent's value, one not given leaves it; what reached the
provider over real HTTP carries them; each exchange records what changed."""

from __future__ import annotations

import openai
import pytest

from sandlot.gateway.generation import (
    GenerationError,
    GenerationSettings,
    agent_values,
    apply_generation,
    parse_model_kwargs,
)

from .gateway_support import oai, records, running_gateway

ALL = GenerationSettings(temperature=0.2, max_output_tokens=900, reasoning_effort="low",
                         seed=7, model_kwargs={"top_p": 0.5})


def test_chat_sets_each_field_and_keeps_the_agents_field_names():
    body = {"model": "m", "messages": [], "temperature": 1.0, "max_completion_tokens": 32000}
    sent, changed = apply_generation(ALL, "chat", body)
    assert sent["temperature"] == 0.2 and sent["max_completion_tokens"] == 900
    assert "max_tokens" not in sent  # the agent's own field name is the one set
    assert sent["reasoning_effort"] == "low" and sent["seed"] == 7 and sent["top_p"] == 0.5
    assert changed["temperature"] == {"agent": 1.0, "sent": 0.2}
    assert body["temperature"] == 1.0  # the agent's body itself is left as it came
    assert agent_values("chat", body) == {"temperature": 1.0, "max_output_tokens": 32000}


def test_responses_messages_and_gemini_use_their_own_fields():
    sent, _ = apply_generation(ALL, "responses", {"input": "x", "reasoning": {"summary": "auto"}})
    assert sent["max_output_tokens"] == 900
    assert sent["reasoning"] == {"summary": "auto", "effort": "low"}
    assert "seed" not in sent and ALL.not_sent("responses") == ["seed"]
    sent, _ = apply_generation(ALL, "messages", {"messages": [], "max_tokens": 900})
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    # Anthropic wants the answer's room beyond the thinking budget.
    assert sent["max_tokens"] == 1024 + 900 and "seed" not in sent
    sent, _ = apply_generation(ALL, "gemini", {"contents": [],
                                               "generationConfig": {"topK": 3}})
    assert sent["generationConfig"] == {"topK": 3, "temperature": 0.2, "maxOutputTokens": 900,
                                        "thinkingConfig": {"thinkingBudget": 1024}, "seed": 7}
    off, _ = apply_generation(GenerationSettings(reasoning_effort="none"), "messages",
                              {"thinking": {"type": "enabled", "budget_tokens": 5000}})
    assert off["thinking"] == {"type": "disabled"}


def test_nothing_given_changes_nothing():
    body = {"messages": [], "temperature": 0.7}
    assert apply_generation(GenerationSettings(), "chat", body) == (body, {})


@pytest.mark.parametrize(("pairs", "said"), [
    (["top_p"], "use KEY=VALUE"), (["=1"], "use KEY=VALUE"),
    (["messages=[]"], "carries the conversation"), (["model=x"], "carries the conversation"),
])
def test_bad_model_kwargs_are_refused(pairs, said):
    with pytest.raises(GenerationError, match=said):
        parse_model_kwargs(pairs)


def test_model_kwarg_values_read_as_json_when_they_are():
    assert parse_model_kwargs(["top_p=0.9", "stop=[\"x\"]", "user=bob", "flag=true"]) == {
        "top_p": 0.9, "stop": ["x"], "user": "bob", "flag": True}


KEY_ENV = "SANDLOT_GW_TEST_GENERATION_KEY"


@pytest.fixture
def provider_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-upstream-generation-test")


def test_the_provider_receives_the_settings_over_http_and_the_exchange_records_them(
        runner, tmp_path, provider_key):
    from .gateway_support import provider

    async def body() -> None:
        async with provider(required_key=None) as upstream, running_gateway(
                "openai/m1", api_base=upstream.base_url, api_key_env=KEY_ENV) as gw:
            gw.generation = ALL
            session = await gw.open_trial("t", "task", tmp_path / "t")
            async with oai(gw, session.key) as client:
                await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}], temperature=1.0,
                    max_tokens=5000)
            (seen,) = upstream.seen_bodies
            assert seen["temperature"] == 0.2 and seen["max_tokens"] == 900
            assert seen["seed"] == 7 and seen["top_p"] == 0.5
            assert seen["reasoning_effort"] == "low"
            (record,) = records(session)
            assert record["generation"]["temperature"] == {"agent": 1.0, "sent": 0.2}
            assert record["request"]["temperature"] == 0.2  # the request as sent
            assert session.sent_settings.values == {"temperature": [1.0],
                                                    "max_output_tokens": [5000]}
            assert session.sent_settings.n_changed == 1

    runner.run(body())


def test_settings_reach_the_provider_in_every_format_through_litellm(runner, tmp_path,
                                                                      provider_key):
    """Anthropic's Messages from an agent, translated by LiteLLM for a chat provider: the
    temperature the job set is what the provider is asked for."""
    from .gateway_support import ant, provider

    async def body() -> None:
        async with provider(required_key=None) as upstream, running_gateway(
                "openai/m1", api_base=upstream.base_url, api_key_env=KEY_ENV) as gw:
            gw.generation = GenerationSettings(temperature=0.3, max_output_tokens=700)
            session = await gw.open_trial("t", "task", tmp_path / "t")
            async with ant(gw, session.key) as claude:
                await claude.messages.create(
                    model="m", max_tokens=4000, extra_body={"temperature": 1.0},
                    messages=[{"role": "user", "content": "hi"}])
            (seen,) = upstream.seen_bodies
            assert seen["temperature"] == 0.3
            # LiteLLM picks the provider's API (here OpenAI's Responses) and its field name.
            assert 700 in (seen.get("max_tokens"), seen.get("max_completion_tokens"),
                           seen.get("max_output_tokens")), seen

    runner.run(body())


def test_a_request_without_settings_keeps_the_agents_values(runner, tmp_path):
    async def body() -> None:
        async with running_gateway() as gw:
            session = await gw.open_trial("t", "task", tmp_path / "t")
            async with oai(gw, session.key) as client:
                await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}], temperature=0.9)
            (record,) = records(session)
            assert record["request"]["temperature"] == 0.9 and "generation" not in record

    runner.run(body())


def test_openai_client_sees_a_normal_answer_with_settings(runner, tmp_path):
    async def body() -> None:
        async with running_gateway() as gw:
            gw.generation = ALL
            session = await gw.open_trial("t", "task", tmp_path / "t")
            async with oai(gw, session.key) as client:
                answer = await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}])
            assert isinstance(answer, openai.types.chat.ChatCompletion)

    runner.run(body())
