"""The job's spend and provider state when trials run on many nodes, each with a gateway.

A local job's gateway counts the job's spend and sees the provider's fatal answers. On a
cluster each node's gateway sees only its own trials, so the driver sums what the nodes
report (each node's running total, counted as the change since its last report) and
keeps the first fatal answer any node saw. The job reads this as it reads a local
gateway (`job_spend`, `health`, `start`, `stop`), so its stop-early logic is the same.

Each node's gateway holds the job's budget itself, against its own spend plus what the
driver tells it was spent elsewhere (`elsewhere`, sent before each try and after each
poll): within a node the budget holds request by request, as in a local run; across
nodes, a node learns of the others' spend at the next poll (0.5 s).
"""

from __future__ import annotations

from sandlot.executors.node import NodeReport
from sandlot.gateway.budget import Budget, JobSpend
from sandlot.gateway.health import ProviderFailure, ProviderHealth


class ClusterSpend:
    def __init__(self, budget: Budget, model: str, key_env: str | None) -> None:
        self.job_spend = JobSpend(budget)
        self.health = ProviderHealth(model=model, key_env=key_env)
        self._seen: dict[str, tuple[int, float]] = {}

    async def start(self) -> None:
        """Nothing to start: the nodes run the gateways."""

    async def stop(self) -> None:
        """Nothing to stop: the executor closes the nodes."""

    def absorb(self, node: str, tokens: int, cost_usd: float,
               failure: ProviderFailure | None = None) -> None:
        """Count what `node`'s gateway has spent in all (its running total: a figure older
        than one already counted changes nothing); keep a fatal answer it saw."""
        seen_tokens, seen_cost = self._seen.get(node, (0, 0.0))
        if tokens > seen_tokens or cost_usd > seen_cost:
            self._seen[node] = (max(tokens, seen_tokens), max(cost_usd, seen_cost))
            self.job_spend.add(max(0, tokens - seen_tokens), max(0.0, cost_usd - seen_cost))
        if failure is not None:
            self.health.adopt(failure)

    def absorb_report(self, node: str, report: NodeReport) -> None:
        self.absorb(node, report.spent_tokens, report.spent_cost_usd, report.provider_failure)

    def elsewhere(self, node: str) -> tuple[int, float]:
        """The job's spend that `node`'s gateway did not count: other nodes', earlier runs'."""
        tokens, cost = self._seen.get(node, (0, 0.0))
        spend = self.job_spend
        return spend.tokens - tokens, max(0.0, spend.cost_usd - cost)
