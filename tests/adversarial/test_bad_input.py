"""Bad input never gets a traceback, always a message: property tests over the CLI's
arguments (the CLI runs in-process through typer's CliRunner) and over instruction files.

task.toml and reward files have their own property tests (tests/tasks, tests/test_verify.py).
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sandlot.agents import AGENTS
from sandlot.agents.acp_registry import known_specs
from sandlot.cli import app

from .support import load, needs_root_sandbox, run_sandlot, write_task

pytestmark = [pytest.mark.adversarial]

PROPERTY = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


@pytest.fixture(autouse=True)
def _test_cache(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process runs use the test session's cache, never the user's."""
    monkeypatch.setenv("SANDLOT_CACHE_DIR", str(cache_dir))


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One valid, trivial task: a bad argument is the only thing wrong."""
    root = tmp_path_factory.mktemp("bad-input") / "tasks"
    write_task(root, "one")
    return root


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), catch_exceptions=True)


def assert_a_message_not_a_traceback(result: Any, record: Any, name: str) -> None:
    output = result.output
    clean = (isinstance(result.exception, SystemExit) and result.exit_code == 2
             and "Traceback" not in output and output.strip() != "")
    record.attempt(name, clean)
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 2 and output.strip() and "Traceback" not in output, output


def _not_an_int_at_least(low: int) -> st.SearchStrategy[str]:
    def bad(text: str) -> bool:
        try:
            return int(text.strip()) < low
        except ValueError:
            return True
    return st.one_of(st.integers(max_value=low - 1).map(str), st.text(max_size=20)).filter(bad)


def _not_a_multiplier(text: str) -> bool:
    try:
        value = float(text.strip())
    except ValueError:
        return True
    return math.isnan(value) or value < 0.001


BAD_OPTIONS = st.one_of(
    st.tuples(st.sampled_from(["--n-concurrent", "--n-attempts", "--max-turns", "--n-tasks"]),
              _not_an_int_at_least(1)),
    st.tuples(st.sampled_from(["--max-retries", "--repair-attempts"]), _not_an_int_at_least(0)),
    st.tuples(st.just("--timeout-multiplier"),
              st.one_of(st.floats(max_value=0.0009).map(str), st.just("nan"),
                        st.text(max_size=20)).filter(_not_a_multiplier)),
    st.tuples(st.just("--agent-network"),
              st.text(max_size=20).filter(lambda s: s not in ("none", "public"))),
    st.tuples(st.just("--sandbox"),
              st.text(max_size=20).filter(lambda s: s.strip() not in ("local", "docker"))),
)


@PROPERTY
@given(options=st.lists(BAD_OPTIONS, min_size=1, max_size=3))
def test_invalid_option_values_get_a_message(tasks, record, options):
    args = [f"{name}={value}" for name, value in options]
    result = invoke("run", str(tasks), "--agent", "nop", *args)
    assert_a_message_not_a_traceback(result, record, f"bad option values {args!r}")


KNOWN_AGENTS = {*AGENTS, *known_specs()}


@PROPERTY
@given(name=st.text(max_size=30).filter(
    lambda s: ":" not in s and s.strip() not in KNOWN_AGENTS and s not in KNOWN_AGENTS))
def test_unknown_agent_names_get_a_message(tasks, record, name):
    result = invoke("run", str(tasks), "--agent", name)
    assert_a_message_not_a_traceback(result, record, f"unknown agent {name!r}")
    assert "agent" in result.output


def _not_a_model(text: str) -> bool:
    return "/" not in text


@PROPERTY
@given(model=st.one_of(st.text(max_size=30).filter(_not_a_model),
                       st.text(min_size=1, max_size=30).filter(
                           lambda s: s.strip(".") and "/" not in s
                           and s not in ("hello", "shell-echo")).map(lambda s: f"scripted/{s}")))
def test_bad_models_are_refused_before_any_trial(tasks, record, model):
    result = invoke("run", str(tasks), "--agent", "nop", "--model", model)
    assert_a_message_not_a_traceback(result, record, f"bad model {model!r}")


@PROPERTY
@given(data=st.one_of(st.binary(max_size=3000), st.text(max_size=3000).map(str.encode),
                      st.sampled_from([b"", b"   \n\t", b"\xff\xfe\x00", b"\x00" * 100,
                                       "caf\u00e9".encode("latin-1"),
                                       b"\xef\xbb\xbfwith a BOM"])))
def test_any_instruction_file_is_checked_with_a_message(tmp_path_factory, record, data):
    root = tmp_path_factory.mktemp("instruction")
    task = write_task(root, "task")
    (task / "instruction.md").write_bytes(data)
    result = invoke("tasks", "check", str(task))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    clean = result.exception is None or isinstance(result.exception, SystemExit)
    record.attempt("an instruction.md of arbitrary bytes", clean)
    assert clean, repr(result.exception)
    if text is None or not text.strip():
        assert result.exit_code == 1 and "instruction.md" in result.output, result.output
    else:
        assert result.exit_code == 0, result.output


# -- known bugs: inputs that get a traceback today ------------------------------------------

AGENT_BUG = ("agents.create_agent catches only ImportError/AttributeError: a relative module "
             "(`.x:Y`) raises TypeError from importlib.import_module, and a `module:attr` "
             "that is not an agent class (json:JSONDecoder, os.path:join, "
             "sandlot.agents:AGENTS) raises TypeError when called with model=; cli.run shows "
             "a traceback")
_AGENT_XFAIL = pytest.mark.xfail(strict=True, raises=AssertionError, reason=AGENT_BUG)


@pytest.mark.parametrize("agent", [":", "nope:Nope", "sandlot:Nope", *(
    pytest.param(a)
    for a in (".relative:X", "json:JSONDecoder", "os.path:join", "sandlot.agents:AGENTS"))])
def test_an_agent_that_is_not_an_agent_class_gets_a_message(tasks, record, agent):
    result = invoke("run", str(tasks), "--agent", agent)
    assert_a_message_not_a_traceback(result, record, f"--agent {agent!r}")


TEMPLATE_BUG = ("feedback.render_feedback catches KeyError/IndexError/ValueError from "
                "str.format, but an attribute or index on a known field ({feedback.x}, "
                "{reward[0]}) raises AttributeError/TypeError: cli._read_template shows a "
                "traceback")


@PROPERTY
@given(template=st.one_of(
    st.text(max_size=60),
    st.sampled_from(["{", "}", "{0}", "{nope}", "{feedback!z}", "{reward:%%}"])))
def test_repair_templates_get_a_message_or_are_accepted(tasks, tmp_path_factory, record,
                                                       template):
    path = tmp_path_factory.mktemp("template") / "template.txt"
    path.write_text(template)
    # --sandbox nope stops a template that is fine right after it was read and tried.
    result = invoke("run", str(tasks), "--agent", "nop", "--repair-template", str(path),
                    "--repair-attempts", "1", "--sandbox", "nope")
    assert_a_message_not_a_traceback(result, record, f"repair template {template!r}")


@pytest.mark.parametrize("template", ["{feedback.x}", "{reward[0]}"])
def test_repair_template_attribute_access_gets_a_message(tasks, tmp_path, record, template):
    path = tmp_path / "template.txt"
    path.write_text(template)
    result = invoke("run", str(tasks), "--agent", "nop", "--repair-template", str(path),
                    "--repair-attempts", "1", "--sandbox", "nope")
    assert_a_message_not_a_traceback(result, record, f"repair template {template!r}")


PATH_BUG = ("cli.run calls Path.is_dir() on the tasks folder and prepare_job_dir's "
            "root.mkdir() on --jobs-dir without catching OSError: a name too long "
            "(ENAMETOOLONG) or a --jobs-dir that is a file (NotADirectoryError) is a "
            "traceback")


@needs_root_sandbox
@pytest.mark.parametrize("which", ["tasks-dir-too-long", "jobs-dir-is-a-file"])
def test_unusable_paths_get_a_message(tasks, tmp_path, record, which):
    if which == "tasks-dir-too-long":
        args = ["run", "x" * 5000, "--agent", "nop"]
    else:
        (tmp_path / "a-file").write_text("not a folder")
        args = ["run", str(tasks), "--agent", "nop", "--jobs-dir", str(tmp_path / "a-file")]
    assert_a_message_not_a_traceback(invoke(*args), record, which)


JOB_NAME_BUG = ("cli.run uses --job-name as a path under --jobs-dir unchecked: '.' writes "
                "the job into the jobs folder itself, '..' and '../x' outside it (where the "
                "jobs-folder mask does not cover it), 'a/b' nests, a NUL byte or 300 "
                "characters are a traceback. A job name should be one plain folder name")


@needs_root_sandbox
@pytest.mark.parametrize("name", [
    pytest.param(n, id=i)
    for i, n in (("dot", "."), ("dotdot", ".."), ("escape", "../escaped"), ("nested", "a/b"),
                 ("nul", "a\x00b"), ("long", "x" * 300))])
def test_a_job_name_must_be_one_plain_folder_name(tasks, tmp_path, record, name):
    jobs = tmp_path / "jobs" / "inner"
    result = invoke("run", str(tasks), "--agent", "nop", "--jobs-dir", str(jobs),
                    "--job-name", name)
    outside = [p for p in tmp_path.rglob("config.json") if p.parent.parent != jobs]
    if outside:
        record.attempt(f"--job-name {name[:20]!r} places a job outside its folder", False)
    assert not outside, f"a job folder outside {jobs}: {outside}"
    assert_a_message_not_a_traceback(result, record, f"--job-name {name[:20]!r}")


# -- instruction files through a whole run ------------------------------------------------

@needs_root_sandbox
@pytest.mark.e2e
def test_odd_instructions_run_or_are_refused_with_a_message(cache_dir, tmp_path, record):
    """Listed up front and recorded as task_invalid without reaching the model: not UTF-8,
    empty. Run to the end: huge, NUL bytes."""
    refused = tmp_path / "refused"
    write_task(refused, "binary").joinpath("instruction.md").write_bytes(b"\xff\xfe\x00bin")
    write_task(refused, "empty").joinpath("instruction.md").write_text("  \n")
    proc = run_sandlot(cache_dir, "run", str(refused), "--agent", "builtin",
                       "--model", "scripted/hello", "--jobs-dir", str(tmp_path / "jobs"),
                       "--job-name", "refused")
    # Every trial errored: the job ran, and its exit code says it is not a result.
    record.attempt("run tasks with a binary / empty instruction.md",
                   proc.returncode == 4 and "Traceback" not in proc.stdout + proc.stderr)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "2 of 2 trials errored" in proc.stdout
    assert "binary/instruction.md" in proc.stdout and "empty/instruction.md" in proc.stdout
    for name in ("binary", "empty"):
        result = load(tmp_path / "jobs" / "refused" / f"{name}__1" / "result.json")
        assert result["error"]["kind"] == "task_invalid", result
        assert f"{name}/instruction.md" in result["error"]["message"]
        assert not result.get("usage")  # no model request was made

    odd = tmp_path / "odd"
    write_task(odd, "huge").joinpath("instruction.md").write_text("Do it. " * 700_000)
    write_task(odd, "nul-bytes").joinpath("instruction.md").write_text("Do\x00 it.\x00\n")
    proc = run_sandlot(cache_dir, "run", str(odd), "--agent", "builtin", "--model",
                       "scripted/hello", "-n", "2", "--jobs-dir", str(tmp_path / "jobs"),
                       "--job-name", "odd")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ("huge", "nul-bytes"):
        result = load(tmp_path / "jobs" / "odd" / f"{name}__1" / "result.json")
        record.attempt(f"run a task with a {name} instruction", result["error"] is None)
        assert result["error"] is None, result["error"]
        assert result["usage"]["n_requests"] >= 1
    shutil.rmtree(tmp_path / "jobs")
