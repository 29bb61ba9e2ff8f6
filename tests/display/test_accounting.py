"""Accounting in the result files: result.json's usage_source and mismatch flag, and
summary.json's cost per passed trial, tokens/s and telemetry coverage."""

from __future__ import annotations

import json

import pytest

from sandlot.errors import ErrorKind
from sandlot.models import USAGE_TOLERANCE_RATIO, TrialResult

from .support import result, summary_of


def test_gateway_only_usage_source():
    r = result("a", tokens=1_000)
    assert r.usage_source == {
        "trusted": "gateway",
        "gateway": {"input_tokens": 1_000, "output_tokens": 0, "total_tokens": 1_000,
                    "source": "gateway"},
        "self_reported": None, "difference_ratio": None,
        "tolerance_ratio": USAGE_TOLERANCE_RATIO}
    assert r.usage_mismatch is False


@pytest.mark.parametrize(("gateway", "reported", "mismatch"), [
    (10_000, 10_000, False),
    (10_000, 10_400, False),  # within 5 %
    (10_000, 10_600, True),
    (10_000, 9_000, True),
    (0, 50, True),  # the gateway saw nothing, the agent says it spent tokens
])
def test_self_report_beside_the_gateway_and_the_mismatch_flag(gateway, reported, mismatch):
    r = result("a", tokens=gateway, self_reported=reported)
    source = r.usage_source
    assert source is not None
    assert source["gateway"]["total_tokens"] == gateway  # type: ignore[index]
    assert source["self_reported"] == {"input_tokens": reported, "output_tokens": 0,
                                       "total_tokens": reported, "source": "pi"}
    assert r.usage_mismatch is mismatch


def test_self_report_without_gateway_is_not_trusted():
    r = result("a", tokens=None, self_reported=500)
    assert r.usage_source["trusted"] is None  # type: ignore[index]
    assert r.usage_mismatch is False


def test_repair_generations_are_summed():
    r = result("a", tokens=3_000, self_reported=1_000)
    gen = {"self_reported_usage": {"input_tokens": 900, "output_tokens": 100,
                                   "total_tokens": 1_000, "source": "pi"}}
    r.attempts = [{"attempt": 1, "generation": gen}, {"attempt": 2, "generation": gen},
                  {"attempt": 3, "generation": {"error": {"kind": "agent_timeout"}}},
                  {"attempt": 4, "generation": gen}]
    assert r.usage_source["self_reported"]["total_tokens"] == 3_000  # type: ignore[index]
    assert r.usage_mismatch is False


def test_fields_are_written_and_read_back():
    r = result("a", tokens=10_000, self_reported=12_000)
    data = json.loads(r.model_dump_json())
    assert data["usage_mismatch"] is True
    assert data["usage_source"]["difference_ratio"] == 0.2
    # Reading a result.json that carries them (they are recomputed, not trusted).
    again = TrialResult.model_validate_json(r.model_dump_json())
    assert again.usage_source == r.usage_source


def test_summary_spend_figures():
    results = [result("a", tokens=6_000, cost=0.6, agent_sec=20),
               result("b", tokens=4_000, cost=0.4, agent_sec=30, passed=False,
                      self_reported=8_000),
               result("c", tokens=None, error=ErrorKind.SANDBOX_SETUP_FAILED)]
    s = summary_of(results, 3)
    assert s.cost_per_passed_usd == pytest.approx(1.0)
    assert s.tokens_per_sec == pytest.approx(10_000 / 50)
    assert s.telemetry_coverage == pytest.approx(2 / 3)
    assert (s.n_trials_with_usage, s.n_usage_mismatch) == (2, 1)
    # existing fields keep their names
    assert s.usage is not None and s.usage["total_tokens"] == 10_000


def test_summary_without_a_model_or_a_pass():
    s = summary_of([result("a", passed=False)], 1, model=None)
    assert s.cost_per_passed_usd is None and s.tokens_per_sec is None
    assert s.telemetry_coverage is None
