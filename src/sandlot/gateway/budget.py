"""Spend limits the gateway enforces: per trial and per job, in tokens and in USD.

The gateway is the one place that sees every model request with its trusted usage, so it
is where a budget holds: a request that arrives once a trial's (or the job's) spend has
reached its limit is refused with HTTP 402 and a message the agent sees; the request in
flight when the limit is crossed finishes (its size is not known before it is answered),
so spend ends at most one request per concurrent call past the limit.

Tokens are input plus output tokens (cached input included), as in result.json's
`usage.total_tokens`. A cost limit needs a known price: a model without one is refused
before the run (an unknown price is never counted as $0).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

#: HTTP status of a refused request: "payment required" is not retried by the usual SDKs
#: (OpenAI's, Anthropic's, Google's), unlike 429.
BUDGET_STATUS = 402


@dataclass(frozen=True)
class Budget:
    """A limit on spend; None for a dimension without one."""

    max_cost_usd: float | None = None
    max_tokens: int | None = None

    def __bool__(self) -> bool:
        return self.max_cost_usd is not None or self.max_tokens is not None

    def reached(self, tokens: int, cost_usd: float | None) -> str | None:
        """How the spend reached this budget ("12,000 tokens of 10,000"), or None."""
        if self.max_tokens is not None and tokens >= self.max_tokens:
            return f"{tokens:,} tokens of {self.max_tokens:,}"
        if self.max_cost_usd is not None and (cost_usd or 0.0) >= self.max_cost_usd:
            return f"${cost_usd or 0.0:.4f} of ${self.max_cost_usd:.4f}"
        return None

    def describe(self) -> str:
        parts = []
        if self.max_tokens is not None:
            parts.append(f"{self.max_tokens:,} tokens")
        if self.max_cost_usd is not None:
            parts.append(f"${self.max_cost_usd:g}")
        return " or ".join(parts)


@dataclass
class JobSpend:
    """The job's spend so far (trials of an earlier run included, for a resume) against
    its budget; `reached` is set once, when the budget is used up.

    `tokens` and `cost_usd` are what was counted here; `elsewhere_*` what was spent where
    this gateway cannot see (a cluster's other nodes, as the driver last summed them): the
    budget holds against both."""

    budget: Budget
    tokens: int = 0
    cost_usd: float = 0.0
    elsewhere_tokens: int = 0
    elsewhere_cost_usd: float = 0.0

    def __post_init__(self) -> None:
        self.reached_event = asyncio.Event()
        self.reason: str | None = None
        self._check()

    def add(self, tokens: int, cost_usd: float | None) -> None:
        self.tokens += tokens
        self.cost_usd += cost_usd or 0.0
        self._check()

    def count_elsewhere(self, tokens: int, cost_usd: float) -> None:
        """What was spent elsewhere, in all (it replaces the last figure)."""
        self.elsewhere_tokens, self.elsewhere_cost_usd = tokens, cost_usd
        self._check()

    def _check(self) -> None:
        if self.reason is None and self.budget:
            how = self.budget.reached(self.tokens + self.elsewhere_tokens,
                                      self.cost_usd + self.elsewhere_cost_usd)
            if how is not None:
                self.reason = (f"the job's budget ({self.budget.describe()}) was reached: "
                               f"{how} spent")
                self.reached_event.set()

    def stop(self, reason: str) -> None:
        """Count the budget as reached for `reason`: the spend was counted elsewhere (a
        cluster's driver sums every node's)."""
        if self.reason is None:
            self.reason = reason
            self.reached_event.set()

    async def wait_reached(self) -> str:
        await self.reached_event.wait()
        assert self.reason is not None
        return self.reason
