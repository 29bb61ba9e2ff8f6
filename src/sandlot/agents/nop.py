"""The nop agent: changes nothing, so task authors can check their tests fail untouched."""

from __future__ import annotations

from typing_extensions import override

from sandlot.agents.base import AgentContext, AgentOutcome


class NopAgent:
    name = "nop"
    needs_gateway = False

    def __init__(self, model: str | None = None) -> None:
        self.model = model

    @override
    async def setup(self, ctx: AgentContext) -> None:
        return None

    @override
    async def run(self, ctx: AgentContext) -> AgentOutcome:
        return AgentOutcome(exit_code=0)
