"""The adversarial tally: every test reports what it tried through the `record` fixture, and
the end of the run prints attempts tried, attempts blocked, faults injected and results
lost (`pytest -m adversarial` shows it after the test summary)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest


@dataclass
class Tally:
    tried: int = 0
    blocked: int = 0
    faults: int = 0
    lost: int = 0
    #: Attempts that got through: each one is a strict xfail naming the bug in src/.
    not_blocked: list[str] = field(default_factory=list)


TALLY = pytest.StashKey[Tally]()


class Record:
    """What one test tried; `attempt` returns `blocked` so a test can assert on it."""

    def __init__(self, tally: Tally, test_id: str) -> None:
        self._tally = tally
        self._test_id = test_id

    def attempt(self, name: str, blocked: bool) -> bool:
        self._tally.tried += 1
        if blocked:
            self._tally.blocked += 1
        else:
            test = self._test_id.split("::")[-1].split("[")[0]
            self._tally.not_blocked.append(f"{name} ({test})")
        return blocked

    def attempts(self, outcomes: dict[str, bool]) -> dict[str, bool]:
        """Several attempts at once ({name: blocked}); returns the ones not blocked."""
        for name, blocked in outcomes.items():
            self.attempt(name, blocked)
        return {name: b for name, b in outcomes.items() if not b}

    def fault(self, name: str, count: int = 1) -> None:
        del name  # named at the call site for the reader; only the count is tallied
        self._tally.faults += count

    def results(self, expected: int, kept: int) -> int:
        """Finished results that should exist vs. those found intact; returns how many lost."""
        lost = max(0, expected - kept)
        self._tally.lost += lost
        return lost


@pytest.fixture
def record(request: pytest.FixtureRequest) -> Record:
    return Record(request.config.stash.setdefault(TALLY, Tally()), request.node.nodeid)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    tally = config.stash.get(TALLY, None)
    if tally is None:
        return
    terminalreporter.write_sep("=", "adversarial summary")
    terminalreporter.write_line(
        f"adversarial: {tally.tried} attempts tried, {tally.blocked} attempts blocked, "
        f"{tally.faults} faults injected, {tally.lost} results lost")
    for name in tally.not_blocked:
        terminalreporter.write_line(f"  not blocked (a strict xfail naming the bug): {name}")
