"""Budgets held by the gateway: a trial's or the job's spend reached, the next request is
refused with 402 in the caller's wire format (as the official SDKs read it), nothing is
sent upstream, and the trial learns why."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from sandlot.gateway.budget import Budget

from .gateway_support import BASH_TOOL, ant, oai, records, running_gateway

RUNAWAY = "scripted/runaway"  # built in: 2000 input + 500 output tokens a turn, forever
TURN_TOKENS = 2500
TURN_COST = (2000 * 3.0 + 500 * 15.0) / 1e6
USER = [{"role": "user", "content": "Work on it."}]

pytestmark = pytest.mark.timeout(60)


async def _chat(client: openai.AsyncOpenAI, n_done: int) -> None:
    """One more turn of a conversation that has had `n_done` assistant turns."""
    messages = list(USER)
    for i in range(n_done):
        messages += [{"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function",
             "function": {"name": "bash", "arguments": '{"command": "true"}'}}]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": "ok"}]
    await client.chat.completions.create(model="m", messages=messages, tools=[BASH_TOOL])


def test_a_trial_token_budget_refuses_the_next_request_in_every_format(runner, tmp_path):
    async def body() -> None:
        async with running_gateway(RUNAWAY) as gw:
            session = await gw.open_trial("t", "task", tmp_path / "t",
                                          budget=Budget(max_tokens=2 * TURN_TOKENS))
            async with oai(gw, session.key) as client:
                await _chat(client, 0)
                assert not session.budget_spent.is_set()
                await _chat(client, 1)  # the limit is reached only once this one is counted
                with pytest.raises(openai.APIStatusError) as refused:
                    await _chat(client, 2)
            assert refused.value.status_code == 402
            error = refused.value.body
            assert error["code"] == "insufficient_quota"  # OpenAI's clients stop on it
            assert "this trial's budget (5,000 tokens) was reached" in error["message"]
            assert session.budget_spent.is_set() and session.budget_refusal is not None
            async with ant(gw, session.key) as claude:
                with pytest.raises(anthropic.APIStatusError) as billing:
                    await claude.messages.create(model="m", max_tokens=10, messages=USER)
            assert billing.value.status_code == 402
            assert billing.value.body["error"]["type"] == "billing_error"
            async with httpx.AsyncClient(base_url=gw.host_base_url) as raw:
                gemini = await raw.post("/v1beta/models/m:generateContent",
                                        headers={"x-goog-api-key": session.key},
                                        json={"contents": [{"parts": [{"text": "hi"}]}]})
            assert gemini.status_code == 402
            assert gemini.json()["error"]["status"] == "FAILED_PRECONDITION"
            assert session.n_budget_refused == 3
            recs = records(session)
            assert [r["status"] for r in recs] == [200, 200, 402, 402, 402]
            assert all(r["upstream_error"].startswith("not sent:") for r in recs[2:])
            assert session.usage.totals.total_tokens == 2 * TURN_TOKENS

    runner.run(body())


def test_a_trial_cost_budget_counts_the_price_table(runner, tmp_path):
    async def body() -> None:
        async with running_gateway(RUNAWAY) as gw:
            session = await gw.open_trial("t", "task", tmp_path / "t",
                                          budget=Budget(max_cost_usd=1.5 * TURN_COST))
            async with oai(gw, session.key) as client:
                await _chat(client, 0)
                await _chat(client, 1)  # 2 turns' cost: past the budget, counted after
                with pytest.raises(openai.APIStatusError) as refused:
                    await _chat(client, 2)
            assert refused.value.status_code == 402
            assert f"${2 * TURN_COST:.4f} of ${1.5 * TURN_COST:.4f}" in session.budget_refusal

    runner.run(body())


def test_the_job_budget_counts_every_trial_and_refuses_them_all(runner, tmp_path):
    async def body() -> None:
        async with running_gateway(RUNAWAY, job_budget=Budget(max_tokens=3 * TURN_TOKENS)
                                   ) as gw:
            gw.job_spend.add(TURN_TOKENS, None)  # an earlier run's trials, on resume
            a = await gw.open_trial("a", "task", tmp_path / "a")
            b = await gw.open_trial("b", "task", tmp_path / "b")
            async with oai(gw, a.key) as client_a, oai(gw, b.key) as client_b:
                await _chat(client_a, 0)
                assert gw.job_spend.reason is None
                await _chat(client_b, 0)
                assert gw.job_spend.reason is not None
                assert "the job's budget (7,500 tokens) was reached" in gw.job_spend.reason
                for client in (client_a, client_b):
                    with pytest.raises(openai.APIStatusError) as refused:
                        await _chat(client, 1)
                    assert refused.value.status_code == 402
            # Not the trials' own budgets: the job stops them (cancelled), it is not theirs.
            assert a.budget_refusal is None and b.budget_refusal is None
            assert gw.job_spend.reached_event.is_set()

    runner.run(body())


def test_no_budget_means_no_refusal(runner, tmp_path):
    async def body() -> None:
        async with running_gateway(RUNAWAY) as gw:
            session = await gw.open_trial("t", "task", tmp_path / "t")
            async with oai(gw, session.key) as client:
                for n in range(6):
                    await _chat(client, n)
            assert session.usage.totals.total_tokens == 6 * TURN_TOKENS
            assert session.budget_refusal is None and gw.job_spend.reason is None

    runner.run(body())
