"""Property tests: whatever task.toml holds, check_task answers with Problems, never raises,
and names task.toml whenever the file is not a valid task config."""

from __future__ import annotations

import datetime as dt
import math
import re
import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from sandlot.errors import TaskLoadError
from sandlot.tasks import Problem, TaskConfig, check_task, load_task
from sandlot.tasks.support import unsupported
from sandlot.tasks.templates import missing_variables

SETTINGS = settings(max_examples=200, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])

# Text that can be written to a file: no lone surrogates.
TEXT = st.text(st.characters(blacklist_categories=("Cs",)))


@pytest.fixture
def task(make_task) -> Path:
    """One valid task; each example overwrites only its task.toml."""
    return make_task("prop")


def toml_problems(problems: list[Problem]) -> list[Problem]:
    """task.toml's errors; its warnings may only be about keys the schema does not know."""
    ours = [p for p in problems if p.file == "task.toml"]
    assert all("unknown key" in p.message for p in ours if p.severity == "warning"), ours
    return [p for p in ours if p.severity == "error"]


def expected_toml_error(text: str) -> bool:
    """The oracle: is this task.toml text invalid TOML or an invalid TaskConfig?"""
    try:
        config = TaskConfig.model_validate(tomllib.loads(text))
    except (tomllib.TOMLDecodeError, ValidationError):
        return True
    # an env template of an unset variable, or a field sandlot cannot honour
    return bool(missing_variables(config) or unsupported(config, oracle=True))


def assert_answer_matches_oracle(path: Path) -> list[Problem]:
    problems = check_task(path)  # must not raise
    assert isinstance(problems, list)
    assert all(isinstance(p, Problem) for p in problems)
    text = (path / "task.toml").read_text()  # as check_task reads it (universal newlines)
    ours = toml_problems(problems)
    if expected_toml_error(text):
        assert ours, f"invalid task.toml not reported: {text!r}"
        assert all(p.severity == "error" and p.message and p.fix for p in ours)
        assert all(str(p).startswith("prop/task.toml") for p in ours)
    else:
        assert ours == [], f"valid task.toml reported: {text!r} -> {ours}"
    return problems


# ---------------------------------------------------------------- arbitrary text / bytes


@SETTINGS
@given(text=TEXT)
def test_arbitrary_text_as_task_toml(task: Path, text: str) -> None:
    (task / "task.toml").write_text(text)
    assert_answer_matches_oracle(task)


@SETTINGS
@given(text=st.from_regex(r"(\[[a-z_. ]{0,12}\]\n|[a-z_.\"]{1,15} ?= ?[^\n]{0,12}\n|#[^\n]*\n"
                          r"|\n)*", fullmatch=True))
def test_toml_looking_text_as_task_toml(task: Path, text: str) -> None:
    (task / "task.toml").write_text(text)
    problems = assert_answer_matches_oracle(task)
    n_lines = text.count("\n") + 1
    for p in toml_problems(problems):
        for m in re.finditer(r"line (\d+)", p.field or ""):
            assert 1 <= int(m.group(1)) <= n_lines


@SETTINGS
@given(data=st.binary(max_size=200))
def test_arbitrary_bytes_as_task_toml(task: Path, data: bytes) -> None:
    (task / "task.toml").write_bytes(data)
    problems = check_task(task)  # must not raise
    assert all(isinstance(p, Problem) for p in problems)
    try:
        data.decode()
    except UnicodeDecodeError:
        return  # not UTF-8: see the pinned bug below for what happens next
    assert_answer_matches_oracle(task)


def test_non_utf8_task_toml_is_reported(task: Path) -> None:
    (task / "task.toml").write_bytes(b'# caf\xe9\nversion = "1.0"\n')
    [problem] = toml_problems(check_task(task))
    assert problem.severity == "error" and problem.field == "line 1"
    assert "not UTF-8" in problem.message and "UTF-8" in problem.fix
    assert str(problem).startswith("prop/task.toml")
    with pytest.raises(TaskLoadError, match="not UTF-8"):  # not a UnicodeDecodeError
        load_task(task)


# ---------------------------------------------------------------- TOML values for known fields


def toml_str(s: str) -> str:
    """A TOML basic string (json.dumps would write astral characters as surrogate pairs)."""
    out = []
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return toml_str(v)
    if isinstance(v, dt.date | dt.datetime | dt.time):
        return v.isoformat()
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{toml_str(k)} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(type(v))


SCALARS = st.one_of(
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(),
    TEXT.filter(lambda s: len(s) < 12),
    st.sampled_from(["none", "public", "host", "600", "1e3", "", "/app", "ten"]),
    st.dates(min_value=dt.date(1000, 1, 1)),
    st.datetimes(min_value=dt.datetime(1000, 1, 1)),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(["A", "PATH", "x", "1"]) | TEXT.filter(bool), inner,
                      max_size=3),
    max_leaves=6,
)
FIELDS = {
    "agent": ["timeout_sec"],
    "verifier": ["timeout_sec", "env"],
    "environment": ["cpus", "memory_mb", "network_mode", "build_timeout_sec", "env", "workdir"],
    "solution": ["env"],
    "metadata": ["author", "difficulty"],
}


@st.composite
def task_tomls(draw: st.DrawFn) -> tuple[str, dict[str, object]]:
    """(text, data): a task.toml with arbitrary values on the known fields (and extras)."""
    top: dict[str, object] = {}
    if draw(st.booleans()):
        top["version"] = draw(VALUES)
    if draw(st.booleans()):
        top["extra_top"] = draw(VALUES)
    tables: dict[str, dict[str, object]] = {}
    for section, fields in FIELDS.items():
        shape = draw(st.sampled_from(["absent", "table", "table", "table", "value"]))
        if shape == "value":
            top[section] = draw(VALUES)
        elif shape == "table":
            keys = draw(st.lists(st.sampled_from([*fields, "unknown_key"]), unique=True))
            tables[section] = {k: draw(VALUES) for k in keys}
    lines = [f"{k} = {toml_value(v)}" for k, v in top.items()]
    for section, body in tables.items():
        lines.append(f"[{section}]")
        lines.extend(f"{k} = {toml_value(v)}" for k, v in body.items())
    return "\n".join(lines) + "\n", {**top, **tables}


@SETTINGS
@given(doc=task_tomls())
def test_arbitrary_values_for_known_fields(task: Path, doc: tuple[str, dict[str, object]]
                                           ) -> None:
    text, _ = doc
    (task / "task.toml").write_text(text)
    tomllib.loads(text)  # the generator writes valid TOML
    problems = assert_answer_matches_oracle(task)
    try:
        TaskConfig.model_validate(tomllib.loads(text))
    except ValidationError as exc:
        fields = [p.field or "" for p in toml_problems(problems)]
        lines = text.split("\n")  # TOML lines end at \n only (not \x85, \u2028)
        for err in exc.errors():
            name = ".".join(str(x) for x in err["loc"])
            assert any(f == name or f.startswith(name + " (line ") for f in fields), (
                f"{name} not named in {fields}")
            # A line number, when given, points at the offending key or table header,
            # or at the line whose inline table holds the key.
            key = str(err["loc"][-1])  # not name.split("."): keys may hold dots
            for f in fields:
                m = re.fullmatch(r"(.+) \(line (\d+)\)", f)
                if not m or m.group(1) != name:
                    continue
                line = lines[int(m.group(2)) - 1]
                inline = f"{{{toml_str(key)} =" in line or f", {toml_str(key)} =" in line
                assert inline or line.startswith((f"{key} =", f'"{key}" =', f"[{key}]")), (
                    f, line)
        for f in fields:  # every line-numbered field is one of pydantic's locations
            m = re.fullmatch(r"(.+) \(line (\d+)\)", f)
            assert not m or any(m.group(1) == ".".join(str(x) for x in err["loc"])
                                for err in exc.errors()), f
    else:
        expected = TaskConfig.model_validate(tomllib.loads(text))
        assert repr(load_task(task).config.model_dump()) == repr(expected.model_dump())  # nan


@SETTINGS
@given(text=TEXT)
def test_a_task_that_checks_clean_loads(task: Path, text: str) -> None:
    (task / "task.toml").write_text(text)
    if [p for p in check_task(task) if p.severity == "error"]:
        with pytest.raises(TaskLoadError):
            load_task(task)
    else:
        load_task(task)
