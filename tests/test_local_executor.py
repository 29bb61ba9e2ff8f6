"""The executor contract on the local pool (sandlot.executors.local), local sandboxes."""

from __future__ import annotations

from pathlib import Path

import pytest

from executor_contract import ExecutorContract, MakeExecutor
from sandlot.agents import create_agent
from sandlot.errors import SandboxError
from sandlot.executors import LocalExecutor
from sandlot.sandbox.local_backend import LocalBackend, check_local_backend
from sandlot.trial import TrialSettings
from sandlot.verify import ScriptVerifier

pytestmark = [pytest.mark.e2e]


class TestLocalExecutor(ExecutorContract):
    @pytest.fixture
    def make_executor(self, cache_dir: Path) -> MakeExecutor:
        try:
            check_local_backend()
        except SandboxError as exc:
            pytest.skip(f"local sandbox cannot run here: {exc}")
        settings = TrialSettings(agent_name="oracle", model=None, sandbox_name="local")

        def make(slots: int) -> LocalExecutor:
            return LocalExecutor(settings, LocalBackend(cache_dir, image_policy="host"),
                                 lambda: create_agent("oracle"), ScriptVerifier(), slots)

        return make


def test_an_executor_needs_a_slot() -> None:
    settings = TrialSettings(agent_name="oracle", model=None, sandbox_name="local")
    with pytest.raises(ValueError, match="at least one slot"):
        LocalExecutor(settings, LocalBackend(Path("/nonexistent")), lambda: create_agent("oracle"),
                      ScriptVerifier(), 0)
