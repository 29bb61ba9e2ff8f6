"""Reading the verifier's reward files: reward.json (dict of floats) else reward.txt."""

from __future__ import annotations

import json
import math
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandlot.errors import ErrorKind, TrialError
from sandlot.verify import headline, parse_reward_json, parse_reward_txt, read_rewards

# ---------------------------------------------------------------- reward.json


@pytest.mark.parametrize(("text", "expected"), [
    ('{"reward": 1.0}', {"reward": 1.0}),
    ('{"reward": 1}', {"reward": 1.0}),
    ('{"reward": 0.25, "tests_passed": 3, "style": -0.5}',
     {"reward": 0.25, "tests_passed": 3.0, "style": -0.5}),
    (' \n{"accuracy": 0.5}\n', {"accuracy": 0.5}),
    ('{"reward": 1e-3}', {"reward": 0.001}),
])
def test_parse_reward_json_valid(text: str, expected: dict[str, float]) -> None:
    rewards = parse_reward_json(text)
    assert rewards == expected
    assert all(type(v) is float for v in rewards.values())


@pytest.mark.parametrize(("text", "needle"), [
    ("", "not valid JSON"),
    ("reward: 1", "not valid JSON"),
    ('{"reward": 1.0', "not valid JSON"),
    ("[1.0]", "JSON object"),
    ("1.0", "JSON object"),
    ('"1.0"', "JSON object"),
    ("null", "JSON object"),
    ("{}", "non-empty"),
    ('{"reward": true}', "'reward'"),
    ('{"reward": false}', "not a number"),
    ('{"reward": "1.0"}', "not a number"),
    ('{"reward": null}', "not a number"),
    ('{"reward": [1]}', "not a number"),
    ('{"reward": {"x": 1}}', "not a number"),
    ('{"reward": NaN}', "finite"),
    ('{"reward": Infinity}', "finite"),
    ('{"reward": -Infinity}', "finite"),
    ('{"reward": 1e999}', "finite"),
    ('{"reward": 1, "bonus": NaN}', "'bonus'"),
])
def test_parse_reward_json_garbage_says_what_is_wrong(text: str, needle: str) -> None:
    with pytest.raises(ValueError, match=r"reward\.json") as info:
        parse_reward_json(text)
    assert needle in str(info.value)


def test_headline_is_the_reward_key() -> None:
    assert headline({"a": 0.1, "reward": 0.7, "z": 0.9}) == 0.7


def test_headline_is_the_only_key() -> None:
    assert headline({"accuracy": 0.4}) == 0.4


def test_headline_with_several_keys_and_no_reward_is_ambiguous() -> None:
    with pytest.raises(ValueError, match="several keys") as info:
        headline({"b": 1.0, "a": 0.0})
    assert "a, b" in str(info.value) and "'reward'" in str(info.value)


# ---------------------------------------------------------------- reward.txt


@pytest.mark.parametrize(("text", "expected"), [
    ("1", 1.0), ("0\n", 0.0), ("  0.5  \n\n", 0.5), ("-1", -1.0), ("1e-2", 0.01),
    ("+0.75", 0.75),
])
def test_parse_reward_txt_valid(text: str, expected: float) -> None:
    assert parse_reward_txt(text) == expected


@pytest.mark.parametrize(("text", "needle"), [
    ("", "one number"),
    ("\n\n", "one number"),
    ("PASSED", "one number"),
    ("reward: 1", "one number"),
    ("1\n0\n", "one number"),
    ("1 0", "one number"),
    ("50%", "one number"),
    ("nan", "finite"),
    ("inf", "finite"),
    ("-Infinity", "finite"),
    ("1e400", "finite"),
])
def test_parse_reward_txt_garbage_says_what_is_wrong(text: str, needle: str) -> None:
    with pytest.raises(ValueError, match=r"reward\.txt") as info:
        parse_reward_txt(text)
    assert needle in str(info.value)


def test_parse_reward_txt_shortens_a_long_garbage_value() -> None:
    with pytest.raises(ValueError) as info:
        parse_reward_txt("x" * 10_000)
    assert len(str(info.value)) < 200


# ---------------------------------------------------------------- read_rewards


def test_read_rewards_from_reward_txt(tmp_path: Path) -> None:
    (tmp_path / "reward.txt").write_text("0.5\n")
    assert read_rewards(tmp_path) == (0.5, {"reward": 0.5})


def test_read_rewards_from_reward_json(tmp_path: Path) -> None:
    (tmp_path / "reward.json").write_text('{"reward": 0.5, "partial": 0.25}')
    assert read_rewards(tmp_path) == (0.5, {"reward": 0.5, "partial": 0.25})


def test_read_rewards_prefers_reward_json(tmp_path: Path) -> None:
    (tmp_path / "reward.json").write_text('{"reward": 0.25}')
    (tmp_path / "reward.txt").write_text("1\n")
    assert read_rewards(tmp_path) == (0.25, {"reward": 0.25})


def test_read_rewards_does_not_fall_back_when_reward_json_is_garbage(tmp_path: Path) -> None:
    (tmp_path / "reward.json").write_text("oops")
    (tmp_path / "reward.txt").write_text("1\n")
    with pytest.raises(TrialError) as info:
        read_rewards(tmp_path)
    assert info.value.kind is ErrorKind.REWARD_PARSE_ERROR
    assert "reward.json" in info.value.message


def test_read_rewards_missing_is_reward_missing(tmp_path: Path) -> None:
    with pytest.raises(TrialError) as info:
        read_rewards(tmp_path)
    assert info.value.kind is ErrorKind.REWARD_MISSING
    assert info.value.phase == "verify"
    assert "reward.json" in info.value.message and "reward.txt" in info.value.message


def test_read_rewards_on_a_missing_folder_is_reward_missing(tmp_path: Path) -> None:
    with pytest.raises(TrialError) as info:
        read_rewards(tmp_path / "nope")
    assert info.value.kind is ErrorKind.REWARD_MISSING


def test_read_rewards_folder_named_reward_txt_is_not_a_reward(tmp_path: Path) -> None:
    (tmp_path / "reward.txt").mkdir()
    with pytest.raises(TrialError) as info:
        read_rewards(tmp_path)
    assert info.value.kind is ErrorKind.REWARD_MISSING


@pytest.mark.parametrize(("name", "content", "needle"), [
    ("reward.txt", "", "reward.txt"),
    ("reward.txt", "all tests passed\n", "all tests passed"),
    ("reward.txt", "nan", "finite"),
    ("reward.json", "", "reward.json"),
    ("reward.json", "[0.5]", "object"),
    ("reward.json", '{"reward": true}', "not a number"),
    ("reward.json", '{"a": 0.5, "b": 1.0}', "several keys"),
])
def test_read_rewards_garbage_is_reward_parse_error(tmp_path: Path, name: str, content: str,
                                                    needle: str) -> None:
    (tmp_path / name).write_text(content)
    with pytest.raises(TrialError) as info:
        read_rewards(tmp_path)
    assert info.value.kind is ErrorKind.REWARD_PARSE_ERROR
    assert info.value.phase == "verify"
    assert needle in info.value.message


def test_read_rewards_binary_garbage_is_reward_parse_error(tmp_path: Path) -> None:
    (tmp_path / "reward.txt").write_bytes(b"\xff\xfe\x00\x01")
    with pytest.raises(TrialError) as info:
        read_rewards(tmp_path)
    assert info.value.kind is ErrorKind.REWARD_PARSE_ERROR


def test_read_rewards_huge_integer_is_reward_parse_error(tmp_path: Path) -> None:
    (tmp_path / "reward.json").write_text('{"reward": 1' + "0" * 400 + "}")
    with pytest.raises(TrialError) as info:
        read_rewards(tmp_path)
    assert info.value.kind is ErrorKind.REWARD_PARSE_ERROR


def test_read_rewards_deeply_nested_json_is_reward_parse_error(tmp_path: Path) -> None:
    depth = sys.getrecursionlimit() + 100
    (tmp_path / "reward.json").write_text("[" * depth + "]" * depth)
    with pytest.raises(TrialError) as info:
        read_rewards(tmp_path)
    assert info.value.kind is ErrorKind.REWARD_PARSE_ERROR


# ---------------------------------------------------------------- property


def _json_value(leaves: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    return st.recursive(leaves, lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8)


# Integers are bounded: a float-overflowing int is a known bug pinned above.
_LEAVES = (st.none() | st.booleans() | st.integers(-(10**300), 10**300)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=10))
_REWARD_JSON = st.one_of(
    st.text(),
    st.dictionaries(st.text(max_size=8) | st.just("reward"), _LEAVES, max_size=4)
    .map(lambda d: json.dumps(d)),
    _json_value(_LEAVES).map(lambda v: json.dumps(v)),
)
_REWARD_TXT = st.one_of(
    st.text(),
    st.floats().map(repr),
    st.integers().map(str),
    st.from_regex(r"\s*[-+]?(\d+\.?\d*|nan|inf)([eE][-+]?\d{1,4})?\s*", fullmatch=True),
)


@settings(max_examples=300, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(json_text=st.none() | _REWARD_JSON, txt_text=st.none() | _REWARD_TXT)
def test_read_rewards_returns_finite_floats_or_a_trial_error(json_text: str | None,
                                                             txt_text: str | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        if json_text is not None:
            (logs / "reward.json").write_text(json_text, errors="surrogatepass")
        if txt_text is not None:
            (logs / "reward.txt").write_text(txt_text, errors="surrogatepass")
        try:
            reward, rewards = read_rewards(logs)
        except TrialError as exc:
            if json_text is None and txt_text is None:
                assert exc.kind is ErrorKind.REWARD_MISSING
            else:
                assert exc.kind is ErrorKind.REWARD_PARSE_ERROR
            assert exc.message
            return
        assert type(reward) is float and math.isfinite(reward)
        assert rewards and all(type(v) is float and math.isfinite(v) for v in rewards.values())
        assert reward in rewards.values()
