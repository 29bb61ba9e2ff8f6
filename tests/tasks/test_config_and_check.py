"""Task validation: check_task / check_tasks, `sandlot tasks check`, `sandlot run` refusing
invalid tasks up front, TaskConfig keeping unknown keys, and discover_tasks filters."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from sandlot.errors import TaskLoadError
from sandlot.tasks import Problem, TaskConfig, check_task, check_tasks, discover_tasks, load_task

# ---------------------------------------------------------------- helpers


def errors(problems: list[Problem]) -> list[Problem]:
    return [p for p in problems if p.severity == "error"]


def only(problems: list[Problem], file: str) -> list[Problem]:
    return [p for p in problems if p.file == file]


def one_error(problems: list[Problem], file: str) -> Problem:
    found = errors(only(problems, file))
    assert len(found) == 1, f"expected one error for {file}, got {problems}"
    return found[0]


# ---------------------------------------------------------------- a valid task


def test_a_well_formed_task_has_no_problems(make_task) -> None:
    task = make_task("good")
    assert check_task(task) == []
    loaded = load_task(task)
    assert loaded.name == "good"
    assert loaded.config.agent.timeout_sec == 60


# ---------------------------------------------------------------- files


def test_missing_instruction_md_is_an_error(make_task) -> None:
    task = make_task("no-instruction")
    (task / "instruction.md").unlink()
    problem = one_error(check_task(task), "instruction.md")
    assert problem.task == "no-instruction"
    assert "missing" in problem.message
    assert "instruction.md" in problem.fix


@pytest.mark.parametrize("content", ["", "   \n\n\t\n"])
def test_empty_instruction_md_is_an_error(make_task, content: str) -> None:
    task = make_task("empty-instruction", instruction=content)
    problem = one_error(check_task(task), "instruction.md")
    assert "empty" in problem.message


def test_scripts_without_the_exec_bit_are_fine(make_task) -> None:
    """Archives lose the bit; Harbor runs test.sh and solve.sh with bash anyway."""
    task = make_task("not-exec")
    (task / "tests" / "test.sh").chmod(0o644)
    (task / "solution" / "solve.sh").chmod(0o600)
    assert check_task(task) == []
    assert load_task(task).is_valid


def test_missing_test_sh_is_an_error(make_task) -> None:
    task = make_task("no-test")
    (task / "tests" / "test.sh").unlink()
    problem = one_error(check_task(task), "tests/test.sh")
    assert "missing" in problem.message
    assert "reward" in problem.fix  # tells what test.sh must do


def test_missing_solve_sh_is_an_error_for_the_oracle(make_task) -> None:
    task = make_task("no-solution")
    (task / "solution" / "solve.sh").unlink()
    problem = one_error(check_task(task), "solution/solve.sh")
    assert "missing" in problem.message
    with pytest.raises(TaskLoadError):
        load_task(task)


def test_missing_solve_sh_is_only_a_warning_without_need_solution(make_task) -> None:
    task = make_task("no-solution")
    (task / "solution" / "solve.sh").unlink()
    problems = check_task(task, need_solution=False)
    assert errors(problems) == []
    [warning] = only(problems, "solution/solve.sh")
    assert warning.severity == "warning"


def test_missing_task_toml_is_reported_not_raised(make_task) -> None:
    task = make_task("no-toml")
    (task / "task.toml").unlink()
    problem = one_error(check_task(task), "task.toml")
    assert "missing" in problem.message


def test_a_terminal_bench_1_task_is_recognised_and_the_fix_says_convert_it(make_task) -> None:
    task = make_task("tb1")
    (task / "task.toml").unlink()
    (task / "task.yaml").write_text("instruction: do it\n")
    problem = one_error(check_task(task), "task.toml")
    assert "Terminal-Bench 1 task" in problem.message and "adapter" in problem.fix


def test_every_problem_of_a_task_is_listed_not_just_the_first(make_task) -> None:
    task = make_task("many", instruction="",
                     task_toml='[agent]\ntimeout_sec = "soon"\n')
    (task / "tests" / "test.sh").unlink()
    (task / "solution" / "solve.sh").unlink()
    files = {p.file for p in errors(check_task(task))}
    assert files == {"task.toml", "instruction.md", "tests/test.sh", "solution/solve.sh"}


def test_check_tasks_covers_every_task(make_task) -> None:
    good = make_task("good")
    bad = make_task("bad", instruction="")
    problems = check_tasks([good, bad])
    assert {p.task for p in problems} == {"bad"}


def test_problem_str_names_task_file_field_and_fix() -> None:
    p = Problem("t", "task.toml", "agent.timeout_sec (line 3)", "not a number", "set it")
    assert str(p) == "t/task.toml: agent.timeout_sec (line 3): not a number (fix: set it)"


# ---------------------------------------------------------------- task.toml


def test_bad_toml_syntax_names_the_file_and_line(make_task) -> None:
    task = make_task("bad-toml", task_toml='version = "1.0"\n[agent]\ntimeout_sec = = 3\n')
    problem = one_error(check_task(task), "task.toml")
    assert problem.field == "line 3"
    assert "line 3" in str(problem)
    assert "TOML" in problem.message
    assert problem.fix


def test_unterminated_string_in_toml_names_its_line(make_task) -> None:
    toml = 'version = "1.0"\n\n[verifier]\ntimeout_sec = 10\nenv = { A = "open }\n'
    problem = one_error(check_task(make_task("bad-toml2", task_toml=toml)), "task.toml")
    assert problem.field == "line 5"


@pytest.mark.parametrize("value", ['"ten"', '"10 minutes"', "[1, 2]", "{ a = 1 }"])
def test_timeout_not_a_number_names_field_line_and_fix(make_task, value: str) -> None:
    toml = f'version = "1.0"\n[agent]\ntimeout_sec = {value}\n'
    problem = one_error(check_task(make_task("bad-timeout", task_toml=toml)), "task.toml")
    assert problem.field is not None
    assert problem.field.startswith("agent.timeout_sec")
    assert "line 3" in problem.field
    assert "agent.timeout_sec" in problem.fix
    assert "number" in problem.fix


@pytest.mark.parametrize("value", ["4", "0", '"10G"'])
def test_storage_mb_too_small_or_not_a_number_says_what_fits(make_task, value: str) -> None:
    toml = f"[environment]\nstorage_mb = {value}\n"
    problem = one_error(check_task(make_task("disk", task_toml=toml)), "task.toml")
    assert problem.field == "environment.storage_mb (line 2)"
    assert "at least 16" in problem.fix and "environment.storage_mb = 10240" in problem.fix


def test_verifier_timeout_not_a_number_is_told_apart_from_agent_timeout(make_task) -> None:
    toml = '[agent]\ntimeout_sec = 5\n[verifier]\ntimeout_sec = "x"\n'
    problem = one_error(check_task(make_task("vt", task_toml=toml)), "task.toml")
    assert problem.field == "verifier.timeout_sec (line 4)"


@pytest.mark.parametrize("value", ["0", "-1", "-0.5"])
def test_timeout_must_be_positive(make_task, value: str) -> None:
    toml = f"[agent]\ntimeout_sec = {value}\n"
    problem = one_error(check_task(make_task("zero", task_toml=toml)), "task.toml")
    assert problem.field == "agent.timeout_sec (line 2)"


def test_boolean_timeout_is_not_a_number(make_task) -> None:
    toml = "[agent]\ntimeout_sec = true\n"
    problem = one_error(check_task(make_task("bool-timeout", task_toml=toml)), "task.toml")
    assert problem.field is not None and problem.field.startswith("agent.timeout_sec")


def test_dotted_key_timeout_error_names_the_line(make_task) -> None:
    toml = 'version = "1.0"\nagent.timeout_sec = "x"\n'
    problem = one_error(check_task(make_task("dotted", task_toml=toml)), "task.toml")
    assert problem.field == "agent.timeout_sec (line 2)"


def test_negative_memory_mb_is_an_error(make_task) -> None:
    toml = "[environment]\ncpus = 1\nmemory_mb = -512\n"
    problem = one_error(check_task(make_task("neg-mem", task_toml=toml)), "task.toml")
    assert problem.field == "environment.memory_mb (line 3)"
    assert "-512" in problem.message
    assert "positive" in problem.fix


def test_invalid_network_mode_lists_the_allowed_values(make_task) -> None:
    toml = '[environment]\nnetwork_mode = "bridge"\n'
    problem = one_error(check_task(make_task("net", task_toml=toml)), "task.toml")
    assert problem.field == "environment.network_mode (line 2)"
    assert "bridge" in problem.message
    assert "none" in problem.fix and "public" in problem.fix


def test_section_that_is_not_a_table_is_an_error(make_task) -> None:
    problem = one_error(check_task(make_task("flat", task_toml="environment = 5\n")),
                        "task.toml")
    assert problem.field == "environment (line 1)"
    assert "table" in problem.fix


def test_several_field_errors_are_all_listed(make_task) -> None:
    toml = ('[agent]\ntimeout_sec = "x"\n[environment]\nmemory_mb = -1\n'
            'network_mode = "host"\n')
    fields = {p.field for p in errors(check_task(make_task("multi", task_toml=toml)))}
    assert fields == {"agent.timeout_sec (line 2)", "environment.memory_mb (line 4)",
                      "environment.network_mode (line 5)"}


def test_unknown_keys_are_kept_and_not_fatal(make_task) -> None:
    toml = ('version = "1.0"\nsource = "terminal-bench"\n'
            '[metadata]\nauthor = "a"\ndifficulty = "hard"\n'
            '[agent]\ntimeout_sec = 30\nlaunch_mode = "tmux"\n'
            '[environment]\nmemory_mb = 1024\ngpu = 0\n'
            '[custom]\nanything = [1, 2]\n')
    task = make_task("extras", task_toml=toml)
    problems = check_task(task)
    assert errors(problems) == []
    # Each unknown key is a warning naming it (and the known key it looks like, if any).
    by_field = {p.field: p for p in problems}
    assert set(by_field) == {"agent.launch_mode (line 8)", "environment.gpu (line 11)",
                             "custom (line 12)"}
    assert "did you mean environment.gpus" in by_field["environment.gpu (line 11)"].message
    assert "did you mean" not in by_field["agent.launch_mode (line 8)"].message
    assert all(p.severity == "warning" for p in problems)
    config = TaskConfig.model_validate(tomllib.loads(toml))
    assert config.source == "terminal-bench"  # Harbor's own key
    assert config.model_extra == {"custom": {"anything": [1, 2]}}
    assert config.agent.model_extra == {"launch_mode": "tmux"}
    assert config.environment.model_extra == {"gpu": 0}
    assert config.metadata == {"author": "a", "difficulty": "hard"}
    assert config.agent.timeout_sec == 30
    assert load_task(task).config.model_extra == config.model_extra


def test_defaults_when_sections_are_absent() -> None:
    config = TaskConfig.model_validate({})
    assert config.agent.timeout_sec > 0
    assert config.verifier.timeout_sec > 0
    assert config.environment.network_mode is None
    assert config.network_mode == "none"
    assert config.environment.memory_mb is None


# ---------------------------------------------------------------- Dockerfile


DOCKERFILE_REFUSALS = {
    "add-url": ("FROM debian:bookworm\nADD https://example.com/data.tgz /opt/\n", 2),
    "bind-mount": ("FROM debian:bookworm\nWORKDIR /app\nRUN --mount=type=bind,target=/x true\n",
                   3),
}


def test_a_multi_stage_dockerfile_is_valid_and_its_stages_copies_are_checked(make_task) -> None:
    """Stages and COPY --from build on the local sandbox; a context COPY in an earlier
    stage still needs its file in environment/."""
    text = ("FROM python:3.11 AS build\nCOPY missing.txt /src/\nRUN true\n"
            "FROM debian:bookworm\nCOPY --from=build /src /app\nCOPY --from=alpine:3 /x /y\n")
    problems = errors(only(check_task(make_task("stages", dockerfile=text)),
                           "environment/Dockerfile"))
    assert [(p.field, p.message) for p in problems] == [
        ("line 2: COPY missing.txt", "the source does not exist inside environment/")]


@pytest.mark.parametrize("case", sorted(DOCKERFILE_REFUSALS))
def test_dockerfile_refusals_name_the_line_and_a_container_backend(make_task,
                                                                   case: str) -> None:
    text, line = DOCKERFILE_REFUSALS[case]
    problems = errors(only(check_task(make_task(case, dockerfile=text)),
                           "environment/Dockerfile"))
    at_line = [p for p in problems if p.field == f"line {line}"]
    assert at_line, f"no problem at line {line}: {problems}"
    assert all("container backend" in p.fix for p in at_line)


def test_heredoc_body_is_not_reported_as_unknown_instructions(make_task) -> None:
    text = "FROM debian:bookworm\nRUN <<EOF\nnot-an-instruction hi\nEOF\n"
    problems = only(check_task(make_task("heredoc", dockerfile=text)),
                    "environment/Dockerfile")
    assert problems == []


def test_copy_of_a_missing_file_is_an_error(make_task) -> None:
    text = "FROM debian:bookworm\nWORKDIR /app\nCOPY data.csv ./\n"
    problem = one_error(check_task(make_task("copy-missing", dockerfile=text)),
                        "environment/Dockerfile")
    assert "data.csv" in str(problem)
    assert "environment/" in problem.message


def test_copy_of_an_existing_file_is_fine(make_task) -> None:
    text = "FROM debian:bookworm\nWORKDIR /app\nCOPY data.csv ./\n"
    task = make_task("copy-ok", dockerfile=text, files={"environment/data.csv": "a,b\n"})
    assert check_task(task) == []


def test_copy_escaping_environment_dir_is_an_error(make_task) -> None:
    text = "FROM debian:bookworm\nCOPY ../task.toml /app/\n"
    problem = one_error(check_task(make_task("copy-escape", dockerfile=text)),
                        "environment/Dockerfile")
    assert "../task.toml" in str(problem)


def test_copy_of_a_missing_file_names_its_line(make_task) -> None:
    text = "FROM debian:bookworm\nWORKDIR /app\nCOPY data.csv ./\n"
    problem = one_error(check_task(make_task("copy-missing", dockerfile=text)),
                        "environment/Dockerfile")
    assert "line 3" in str(problem)


@pytest.mark.parametrize("bad_line", [
    'ENV A="unterminated',
    "COPY 'data.csv /app/",
    'COPY ["data.csv", "/app/"',
    "COPY [1, 2]",
])
def test_malformed_dockerfile_line_is_a_problem_not_a_crash(make_task, bad_line: str) -> None:
    text = f"FROM debian:bookworm\n{bad_line}\n"
    task = make_task("malformed", dockerfile=text, files={"environment/data.csv": "x\n"})
    problem = one_error(check_task(task), "environment/Dockerfile")
    assert problem.field == "line 2"


def test_missing_dockerfile_is_a_warning(make_task) -> None:
    task = make_task("no-dockerfile")
    (task / "environment" / "Dockerfile").unlink()
    problems = check_task(task)
    assert errors(problems) == []
    assert [p.severity for p in only(problems, "environment/Dockerfile")] == ["warning"]


def test_docker_compose_asks_for_a_container_backend(make_task) -> None:
    task = make_task("compose", files={"environment/docker-compose.yaml": "services: {}\n"})
    [problem] = errors(check_task(task))
    assert "container backend" in problem.fix


# ---------------------------------------------------------------- discover_tasks


@pytest.fixture
def task_tree(make_task, tmp_path: Path) -> Path:
    for name in ["alpha", "beta", "gamma-1", "gamma-2", "delta"]:
        make_task(name)
    (tmp_path / "tasks" / "not-a-task").mkdir()
    (tmp_path / "tasks" / "not-a-task" / "README.md").write_text("x")
    make_task("alpha/nested")  # two levels down: not a task of the root
    return tmp_path / "tasks"


def names(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


def test_discover_finds_every_subfolder_with_task_toml_sorted(task_tree: Path) -> None:
    assert names(discover_tasks(task_tree)) == ["alpha", "beta", "delta", "gamma-1", "gamma-2"]


def test_discover_a_single_task_folder(task_tree: Path) -> None:
    assert discover_tasks(task_tree / "beta") == [task_tree / "beta"]


def test_discover_include_globs(task_tree: Path) -> None:
    assert names(discover_tasks(task_tree, include=["gamma-*"])) == ["gamma-1", "gamma-2"]
    assert names(discover_tasks(task_tree, include=["alpha", "d*"])) == ["alpha", "delta"]


def test_discover_exclude_globs(task_tree: Path) -> None:
    assert names(discover_tasks(task_tree, exclude=["gamma-*", "beta"])) == ["alpha", "delta"]


def test_discover_include_then_exclude_then_n_tasks(task_tree: Path) -> None:
    found = discover_tasks(task_tree, include=["*a*"], exclude=["delta"], n_tasks=2)
    assert names(found) == ["alpha", "beta"]


def test_discover_n_tasks(task_tree: Path) -> None:
    assert names(discover_tasks(task_tree, n_tasks=1)) == ["alpha"]
    assert len(discover_tasks(task_tree, n_tasks=100)) == 5


def test_discover_nothing_matches(task_tree: Path, tmp_path: Path) -> None:
    assert discover_tasks(task_tree, include=["zzz*"]) == []
    (tmp_path / "empty").mkdir()
    assert discover_tasks(tmp_path / "empty") == []


# ---------------------------------------------------------------- the CLI


def test_cli_tasks_check_lists_each_problem_with_file_field_and_fix(make_task, run_cli,
                                                                     tmp_path: Path) -> None:
    make_task("good")
    make_task("bad-timeout", task_toml='[agent]\ntimeout_sec = "ten"\n')
    make_task("no-instruction")
    (tmp_path / "tasks" / "no-instruction" / "instruction.md").unlink()
    make_task("not-exec")
    (tmp_path / "tasks" / "not-exec" / "tests" / "test.sh").chmod(0o644)
    make_task("bad-toml", task_toml="[agent\n")
    proc = run_cli("tasks", "check", str(tmp_path / "tasks"), timeout=60)
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert "Traceback" not in out + proc.stderr
    assert "bad-timeout/task.toml" in out
    assert "agent.timeout_sec" in out
    assert "no-instruction/instruction.md" in out
    assert "not-exec" not in out  # bash runs a script whatever its mode
    assert "bad-toml/task.toml" in out and "line 1" in out
    assert "fix:" in out
    assert "good/" not in out
    assert "5 tasks checked: 2 ok, 3 with errors" in out


def test_cli_tasks_check_shows_the_field_and_line(make_task, run_cli, tmp_path: Path) -> None:
    make_task("bad-timeout", task_toml='version = "1.0"\n[agent]\ntimeout_sec = "ten"\n')
    make_task("shell", dockerfile="FROM debian:bookworm\nONBUILD RUN true\n")
    proc = run_cli("tasks", "check", str(tmp_path / "tasks"), timeout=60)
    assert proc.returncode == 1
    assert "agent.timeout_sec (line 3)" in proc.stdout
    assert "line 2" in proc.stdout


def test_cli_tasks_check_passes_with_only_warnings(make_task, run_cli,
                                                    tmp_path: Path) -> None:
    task = make_task("no-solution")
    (task / "solution" / "solve.sh").unlink()
    strict = run_cli("tasks", "check", str(tmp_path / "tasks"), timeout=60)
    assert strict.returncode == 1
    assert "solution/solve.sh" in strict.stdout
    lenient = run_cli("tasks", "check", "--no-solution-ok", str(tmp_path / "tasks"), timeout=60)
    assert lenient.returncode == 0, lenient.stdout
    assert "warning" in lenient.stdout
    assert "1 tasks checked: 1 ok, 0 with errors, 1 warnings" in lenient.stdout


def test_cli_tasks_check_on_a_folder_without_tasks(run_cli, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    proc = run_cli("tasks", "check", str(tmp_path / "empty"), timeout=60)
    assert proc.returncode == 2
    assert "no tasks" in proc.stdout


def test_cli_run_runs_the_good_tasks_and_records_each_bad_one_as_task_invalid(
        make_task, run_cli, tmp_path: Path) -> None:
    make_task("fine")
    make_task("broken", task_toml='[agent]\ntimeout_sec = "ten"\n')
    make_task("no-solution")
    (tmp_path / "tasks" / "no-solution" / "solution" / "solve.sh").unlink()
    make_task("not-exec")
    (tmp_path / "tasks" / "not-exec" / "tests" / "test.sh").chmod(0o644)
    (tmp_path / "tasks" / "not-exec" / "solution" / "solve.sh").chmod(0o644)
    jobs = tmp_path / "jobs"
    proc = run_cli("run", str(tmp_path / "tasks"), "--agent", "oracle", "--jobs-dir", str(jobs),
                   "--job-name", "mixed", "--cache-dir", str(tmp_path / "cache"), timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Traceback" not in out
    # The problems are listed up front, in `tasks check`'s words.
    assert "broken/task.toml" in out and "agent.timeout_sec" in out
    assert "no-solution/solution/solve.sh" in out
    assert "2 of 4 tasks cannot run" in out
    results = {name: json.loads((jobs / "mixed" / f"{name}__1" / "result.json").read_text())
               for name in ("fine", "broken", "no-solution", "not-exec")}
    assert results["fine"]["passed"] is True
    assert results["not-exec"]["passed"] is True  # run with bash whatever the mode
    for name in ("broken", "no-solution"):
        error = results[name]["error"]
        assert error["kind"] == "task_invalid", results[name]
        assert f"{name}/" in error["message"] and "fix:" in error["message"]
        assert results[name]["reward"] is None
    summary = json.loads((jobs / "mixed" / "summary.json").read_text())
    assert summary["n_errored"] == 2 and summary["n_passed"] == 2, summary


# ---------------------------------------------------------------- Harbor 1.4 spellings


def test_harbor_schema_keys_are_known_and_typos_name_the_closest(make_task) -> None:
    toml = ('schema_version = "1.4"\nsource = "x"\nartifacts = ["/logs/out.txt"]\n'
            '[task]\nname = "org/demo"\nkeywords = ["a"]\n'
            '[agent]\ntimeout_sec = 30\nuser = "agent"\nnetwork_mode = "no-network"\n'
            '[verifier]\nuser = 1000\nenvironment_mode = "shared"\n'
            '[environment]\nallow_internet = true\ngpus = 0\nos = "Linux"\n'
            'skills_dir = "/skills"\nbuild_timeout_sec = 60\n'
            'mcp_servers = [{ name = "m", transport = "stdio", command = "srv", argz = [] }]\n'
            '[environment.healthcheck]\ncommand = "true"\nretrys = 2\n')
    problems = check_task(make_task("harbor", task_toml=toml))
    assert errors(problems) == []
    fields = sorted(p.field or "" for p in problems)
    assert fields == ["environment.healthcheck.retrys (line 23)",
                      "environment.mcp_servers[0].argz (line 20)"], problems
    by_field = {p.field: p for p in problems}
    assert "did you mean environment.healthcheck.retries" in by_field[
        "environment.healthcheck.retrys (line 23)"].message
    assert "did you mean environment.mcp_servers[0].args" in by_field[
        "environment.mcp_servers[0].argz (line 20)"].message


@pytest.mark.parametrize(("environment", "mode"), [
    ("", "none"),
    ("allow_internet = true", "public"),
    ("allow_internet = false", "none"),
    ('network_mode = "no-network"', "none"),
    ('network_mode = "public"\nallow_internet = false', "public"),  # network_mode wins
])
def test_the_network_comes_from_network_mode_else_allow_internet(environment: str,
                                                                 mode: str) -> None:
    config = TaskConfig.model_validate(tomllib.loads(f"[environment]\n{environment}\n"))
    assert config.network_mode == mode


def test_the_older_size_spellings_fill_memory_and_storage() -> None:
    config = TaskConfig.model_validate(
        tomllib.loads('[environment]\nmemory = "2G"\nstorage = "512M"\n'))
    assert (config.environment.memory_mb, config.environment.storage_mb) == (2048, 512)


def test_a_bad_older_size_names_the_field(make_task) -> None:
    [problem] = errors(check_task(make_task("size", task_toml='[environment]\nmemory = "lots"\n')))
    assert "environment.memory" in problem.message and "2G" in problem.message


def test_a_task_given_as_dot_is_named_after_its_folder(make_task, run_cli,
                                                        tmp_path: Path) -> None:
    task = make_task("dotted")
    assert load_task(task / ".").name == "dotted"
    assert discover_tasks(task / ".", include=["dot*"]) == [task / "."]
    proc = run_cli("run", ".", "--agent", "oracle", "--jobs-dir", str(tmp_path / "jobs"),
                   "--job-name", "dot", timeout=120, cwd=task)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((tmp_path / "jobs" / "dot" / "dotted__1" / "result.json").read_text())
    assert result["task"] == "dotted" and result["passed"] is True
    check = run_cli("tasks", "check", ".", timeout=60, cwd=task)
    assert check.returncode == 0 and "1 tasks checked: 1 ok" in check.stdout, check.stdout


@pytest.mark.parametrize(("value", "ok"), [
    ('"agent"', True), ("1000", True), ('"1000:1000"', True), ('"app:staff"', True),
    ('"a b"', False), ('"x:y:z"', False), ('"evil\\nroot:x:0:0"', False), ("true", False),
    ("-1", False), ('""', False),
])
def test_a_user_is_a_name_or_uid_checked_strictly(make_task, value: str, ok: bool) -> None:
    """The value goes into the sandbox's /etc/passwd: nothing but a plain name or number."""
    problems = errors(check_task(make_task("u", task_toml=f"[agent]\nuser = {value}\n")))
    if ok:
        assert problems == []
    else:
        [problem] = problems
        assert problem.field == "agent.user (line 2)"


def test_env_templates_are_filled_from_the_environment_or_their_default() -> None:
    from sandlot.tasks.templates import fill_templates, missing_variables

    config = TaskConfig.model_validate(tomllib.loads(
        '[environment.env]\nA = "${SET}"\nB = "${UNSET:-fallback}"\nC = "x-${SET}"\n'
        '[solution.env]\nD = "${SET:-ignored}"\n[verifier.env]\nE = "${UNSET}"\n'))
    environ = {"SET": "from the host"}
    assert [(m.field, m.variable) for m in missing_variables(config, environ)] == [
        ("verifier.env.E", "UNSET")]
    filled = fill_templates(config, {**environ, "UNSET": "now set"})
    assert filled.environment.env == {"A": "from the host", "B": "now set",
                                      "C": "x-${SET}"}  # a template only as a whole value
    assert filled.solution.env == {"D": "from the host"}
    assert filled.verifier.env == {"E": "now set"}
    assert config.environment.env["A"] == "${SET}"  # the parsed file is left as it is


@pytest.mark.parametrize(("toml", "field", "needle"), [
    ("[environment]\ngpus = 1\n", "environment.gpus (line 2)", "GPU"),
    ('[environment]\ntpu = { type = "v6e", topology = "2x4" }\n', "environment.tpu (line 2)",
     "TPU"),
    ('[environment]\nos = "windows"\n', "environment.os (line 2)", "windows"),
    ('[[steps]]\nname = "one"\n[steps.verifier]\nenvironment_mode = "separate"\n',
     "steps[0].verifier.environment_mode (line 1)", "differs from the task's"),
    ('[agent]\nnetwork_mode = "allowlist"\nallowed_hosts = ["*.example.org"]\n',
     "agent.allowed_hosts (line 3)", "wildcard"),
    ('[verifier.environment]\ndocker_image = "verifier:1"\n', "verifier.environment (line 1)",
     "image for the tests"),
    ('[[verifier.collect]]\ncommand = "true"\n', "verifier.collect (line 1)", "collect"),
])
def test_what_sandlot_cannot_honour_is_refused_with_the_reason_and_a_fix(
        make_task, toml: str, field: str, needle: str) -> None:
    task = make_task("unsupported", task_toml=toml,
                     files={"steps/one/instruction.md": "Do it.\n"})  # for the [[steps]] case
    [problem] = errors(check_task(task))
    assert problem.field == field, problem
    assert needle in problem.message + problem.fix and problem.fix


def test_a_separate_verifier_is_honoured_unless_it_needs_an_image_of_its_own(make_task) -> None:
    toml = '[verifier]\nenvironment_mode = "separate"\n'
    assert errors(check_task(make_task("separate", task_toml=toml))) == []
    bundled = make_task("bundled", task_toml=toml, files={"tests/Dockerfile": "FROM x\n"})
    [problem] = errors(check_task(bundled))
    assert problem.field == "verifier.environment_mode (line 2)"
    assert "tests/Dockerfile" in problem.message + problem.fix


def test_a_prebuilt_image_is_run_as_it_is_and_its_dockerfile_is_not_checked(make_task) -> None:
    from sandlot.tasks.loader import load_task

    toml = '[environment]\ndocker_image = "python:3.12"\n'
    task = make_task("prebuilt", task_toml=toml, dockerfile="FROM x\nONBUILD RUN true\n")
    problems = check_task(task)
    assert errors(problems) == []
    [warning] = [p for p in problems if p.file == "environment/Dockerfile"]
    assert warning.severity == "warning" and "not used" in warning.message
    loaded = load_task(task)
    assert loaded.prebuilt_image == "python:3.12" and loaded.dockerfile is None
    assert loaded.declared_workdir is None and loaded.workdir == "/app"
    from dataclasses import replace

    assert replace(loaded, image_workdir="/testbed").workdir == "/testbed"


def test_mcp_servers_and_skills_are_refused_for_agents_not_for_the_oracle(make_task) -> None:
    task = make_task("mcp", task_toml='[environment]\nskills_dir = "/skills"\n'
                     'mcp_servers = [{ name = "m", url = "http://127.0.0.1:9" }]\n')
    assert errors(check_task(task, need_solution=True)) == []
    fields = {p.field for p in errors(check_task(task, need_solution=False))}
    assert fields == {"environment.skills_dir (line 2)", "environment.mcp_servers (line 3)"}


def test_artifacts_are_collected_not_warned_about(make_task) -> None:
    problems = check_task(make_task("art", task_toml='artifacts = ["/app/out"]\n'))
    assert [p for p in problems if p.file == "task.toml"] == []


def test_trusted_paths_must_be_absolute(make_task) -> None:
    ok = make_task("trusting", task_toml='[verifier]\ntrusted_paths = ["/usr/lib/x*"]\n')
    assert errors(check_task(ok)) == []
    assert load_task(ok).config.verifier.trusted_paths == ["/usr/lib/x*"]
    [problem] = errors(check_task(make_task("relative", task_toml=(
        '[verifier]\ntrusted_paths = ["usr/lib/x*"]\n'))))
    assert problem.field.startswith("verifier.trusted_paths"), problem
