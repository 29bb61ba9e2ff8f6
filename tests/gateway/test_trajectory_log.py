"""The trial's llm_trajectory.jsonl as the gateway writes it: whole lines, in order,
including an exchange that ends after its trial's session closed."""

from __future__ import annotations

import json

import pytest

from sandlot.gateway.trajectory import TrajectoryLog

pytestmark = pytest.mark.timeout(30)


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_no_exchange_no_file_then_lines_in_order(tmp_path):
    log = TrajectoryLog(tmp_path / "llm_trajectory.jsonl")
    assert not log.path.exists(), "a trial without model requests leaves no trajectory"
    log.append({"seq": 1, "request": {"messages": ["é", "x" * 100_000]}})
    log.append({"seq": 2, "when": tmp_path})  # not JSON-native: written as text
    assert [r["seq"] for r in lines(log.path)] == [1, 2]
    assert lines(log.path)[1]["when"] == str(tmp_path)
    log.close()


def test_a_record_after_close_is_still_appended_and_resume_appends(tmp_path):
    path = tmp_path / "llm_trajectory.jsonl"
    log = TrajectoryLog(path)
    log.append({"seq": 1})
    log.close()
    log.append({"seq": 2})  # a request that was in flight when the trial ended
    log.close()  # closing twice is harmless
    again = TrajectoryLog(path)  # a resumed trial's new session
    again.append({"seq": 3})
    again.close()
    assert [r["seq"] for r in lines(path)] == [1, 2, 3]
