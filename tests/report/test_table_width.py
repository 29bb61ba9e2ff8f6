"""The end-of-run tables at 60, 80 and 120 columns: never wider, never a number cut."""

from __future__ import annotations

import re

import pytest
from rich.console import Console

from sandlot.errors import ErrorKind
from sandlot.models import ErrorInfo, Integrity, TrialResult
from sandlot.report.fit import Column, fit_table
from sandlot.report.summary import summarize
from sandlot.report.table import end_of_run

pytestmark = pytest.mark.timeout(60)

NUMBER = re.compile(r"\$?\d[\d,.]*(?:[kM%s])?")


def result(task: str, attempt: int, reward: float | None, *, error: ErrorKind | None = None,
           tokens: int = 0, cost: float | None = None, tampered: bool = False) -> TrialResult:
    r = TrialResult(
        trial_name=f"{task}__{attempt}", task=task, attempt=attempt, agent="pi",
        model="openrouter/anthropic/claude-sonnet-4-5", reward=reward,
        rewards={} if reward is None else {"reward": reward}, passed=reward == 1.0,
        error=None if error is None else ErrorInfo(kind=error, message="x", phase="agent"),
        timing={"agent": 123.4567, "verifier": 12.5, "total": 140.0},
        usage={"input_tokens": tokens, "output_tokens": tokens // 10,
               "total_tokens": tokens + tokens // 10, "n_requests": 37, "cost_usd": cost})
    if tampered:
        r.integrity = Integrity(status="tampered", reason="x")
    return r


RESULTS = [
    result("configure-a-reverse-proxy-with-tls-termination-and-rate-limits", 1, 1.0,
           tokens=1_234_567, cost=12.345678),
    result("configure-a-reverse-proxy-with-tls-termination-and-rate-limits", 2, 0.25,
           tokens=987_654, cost=3.2),
    result("fix-flaky-test", 1, None, error=ErrorKind.BUILD_FAILED, tokens=0),
    result("fix-flaky-test", 2, 0.0, error=ErrorKind.AGENT_TIMEOUT, tokens=45_000, cost=0.0042),
    result("hello", 1, 0.0, tokens=1500, cost=0.0001, tampered=True),
]


def rendered(renderable: object, width: int) -> str:
    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(renderable)
    return console.export_text(styles=False)


def numbers_in(cells: list[str]) -> list[str]:
    return [m.group(0) for cell in cells for m in NUMBER.finditer(cell)]


@pytest.mark.parametrize("width", [60, 80, 120])
def test_the_end_of_run_tables_fit_and_cut_no_number(width: int) -> None:
    summary = summarize("2026-12-06__12-00-00", "pi", RESULTS[0].model, 6, 2, RESULTS)
    text = rendered(end_of_run(summary, RESULTS), width)
    lines = text.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= width
    assert "…" not in text
    # Every figure the summary table shows is there whole, on one line.
    for figure in ["$15.5500", "2.27M", "226.9k", "185", "25.0%", "0.312", "123.46s",
                   "617.3s", "140.00s", "4,043"]:
        assert any(figure in line for line in lines), (figure, text)
    # The per-task counts and the mean reward stay at every width; per-task spend from 80.
    assert re.search(r"\s1\s+1\s+0\s+0\.625\s", text), text
    assert re.search(r"\s0\s+1\s+1\s+0\.000\s", text), text
    if width >= 80:
        assert "2.44M" in text and "$15.5457" in text and "not shown at" not in text
    else:
        assert "(not shown at 60 columns: tokens, cost)" in text


@pytest.mark.parametrize("width", [60, 80, 120])
def test_a_fitted_table_keeps_every_number_column_whole(width: int) -> None:
    columns = [Column("name", "text"), Column("a"), Column("b", drop_rank=2),
               Column("c", drop_rank=1), Column("note", "words")]
    rows = [["x" * 70, "1234567.891", "$98765.4321", "55.5%", "lots of words " * 6],
            ["short", "0.1", "$0.0001", "100.0%", "ok"]]
    table, dropped = fit_table(columns, rows, width)
    text = rendered(table, width)
    assert max(len(line.rstrip()) for line in text.splitlines()) <= width
    shown = [i for i, c in enumerate(columns) if c.header not in dropped]
    for row in rows:
        for number in numbers_in([row[i] for i in shown if columns[i].kind == "number"]):
            assert number in text, (number, text)
    # Columns go in the stated order: c before b; never a column without a rank.
    assert dropped in ([], ["c"], ["b", "c"])
    assert "name" not in dropped and "a" not in dropped
