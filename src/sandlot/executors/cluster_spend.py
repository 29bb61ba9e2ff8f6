"""The job's spend and provider state when trials run on many nodes, each with a gateway.

A local job's gateway counts the job's spend and sees the provider's fatal answers. On a
cluster each node's gateway sees only its own trials, so the driver sums what the nodes
report (each node's running total, counted as the change since its last report) and
keeps the first fatal answer any node saw. The job reads this as it reads a local
gateway (`job_spend`, `health`, `start`, `stop`), so its stop-early logic is the same.
When the sum reaches the job's budget, every node is told to refuse further requests:
between two polls, spend can pass the budget by what the nodes answered meanwhile.
"""

from __future__ import annotations

from sandlot.executors.node import NodeReport
from sandlot.gateway.budget import Budget, JobSpend
from sandlot.gateway.health import ProviderHealth


class ClusterSpend:
    def __init__(self, budget: Budget, model: str, key_env: str | None) -> None:
        self.job_spend = JobSpend(budget)
        self.health = ProviderHealth(model=model, key_env=key_env)
        self._seen: dict[str, tuple[int, float]] = {}

    async def start(self) -> None:
        """Nothing to start: the nodes run the gateways."""

    async def stop(self) -> None:
        """Nothing to stop: the executor closes the nodes."""

    def absorb(self, node: str, report: NodeReport) -> None:
        """Count what `node` spent since its last report; keep a fatal answer it saw."""
        tokens, cost = self._seen.get(node, (0, 0.0))
        self._seen[node] = (report.spent_tokens, report.spent_cost_usd)
        if report.spent_tokens > tokens or report.spent_cost_usd > cost:
            self.job_spend.add(report.spent_tokens - tokens, report.spent_cost_usd - cost)
        if report.provider_failure is not None:
            self.health.adopt(report.provider_failure)
