"""`sandlot run --config FILE`: a job file with one key per flag, flags over the file over
the environment over the defaults, and the job.yaml a job folder keeps to resume it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer.main
import yaml

from sandlot.cli import app
from sandlot.run_spec import (
    PARAMETER_KEYS,
    RunSpec,
    RunSpecError,
    file_values,
    flag_name,
    read_job_file,
    resolve_run,
    run_keys,
)


def _run_command():  # type: ignore[no-untyped-def]
    """The run command as click sees it (typer brings its own click)."""
    return typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]


def test_every_flag_of_run_has_a_key_with_the_same_default_and_every_key_a_flag():
    spec_defaults = RunSpec().model_dump(by_alias=True)
    flags = {}
    for param in _run_command().params:
        if param.name in ("ctx", "config"):
            continue
        key = PARAMETER_KEYS.get(str(param.name), str(param.name))
        flags[key] = param
    assert set(flags) == set(run_keys())
    for key, param in flags.items():
        default = param.default if param.default is not None else None
        spec_default = spec_defaults[key]
        if param.multiple or param.nargs == -1:
            assert default in (None, []) and spec_default == [], key
            continue
        if isinstance(spec_default, Path):
            spec_default = str(spec_default)
            default = str(default)
        assert default == spec_default, f"{key}: flag default {default!r}, key {spec_default!r}"
        if param.param_type_name == "option":
            assert flag_name(key) in param.opts, (key, param.opts)


def test_yaml_toml_and_json_job_files_read_alike(tmp_path):
    (tmp_path / "job.yaml").write_text("agent: oracle\nn_concurrent: 3\ndataset: d@1\n")
    (tmp_path / "job.toml").write_text('agent = "oracle"\nn_concurrent = 3\ndataset = "d@1"\n')
    (tmp_path / "job.json").write_text('{"agent": "oracle", "n_concurrent": 3, '
                                       '"dataset": "d@1"}')
    specs = [resolve_run({}, {}, tmp_path / name).spec
             for name in ("job.yaml", "job.toml", "job.json")]
    assert specs[0] == specs[1] == specs[2]
    assert specs[0].agent == "oracle" and specs[0].n_concurrent == 3
    assert specs[0].dataset == ["d@1"]  # one value needs no list


def test_relative_paths_in_a_file_are_relative_to_its_folder(tmp_path):
    folder = tmp_path / "configs"
    folder.mkdir()
    data = {"tasks": ["../tasks", "/abs/tasks"], "jobs_dir": "out", "registry_path": "r.json",
            "build_arg": {"A": "1"}}
    values = file_values(folder / "job.yaml", data)
    assert values["tasks"] == [str(tmp_path / "tasks"), "/abs/tasks"]
    assert values["jobs_dir"] == str(folder / "out")
    assert values["registry_path"] == [str(folder / "r.json")]
    assert values["build_arg"] == ["A=1"]


def test_a_flag_beats_the_file_which_beats_the_environment(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("agent: oracle\nimage_policy: strict\nn_attempts: 2\ninclude: [a]\n")
    resolved = resolve_run({"n_attempts": 5, "include": ["b"]}, {"image_policy": "host"}, path)
    spec = resolved.spec
    assert (spec.n_attempts, spec.include, spec.image_policy) == (5, ["b"], "strict")
    assert resolved.where("image_policy") == f"image_policy in {path}"
    assert resolved.where("n_attempts") == "--n-attempts"
    # Without the file's key, the environment's value holds.
    assert resolve_run({}, {"image_policy": "host"}, None).spec.image_policy == "host"


@pytest.mark.parametrize(("text", "said"), [
    ("agent: oracle\nn_concurent: 2\n",
     "'n_concurent' is not a setting; did you mean n_concurrent?"),
    ("agents: [{name: oracle}]\n", "this looks like a Harbor job file: sandlot's key is agent"),
    ("n_concurrent: zero\n", "n_concurrent in {path}: Input should be a valid integer"),
    ("n_concurrent: 0\n", "n_concurrent in {path}: Input should be greater than or equal to 1"),
    ("agent_network: lan\n", "agent_network in {path}: Input should be 'none' or 'public'"),
    ("- agent\n", "the file must be a mapping of settings"),
    ("agent: [oracle\n", "not valid YAML"),
])
def test_a_bad_job_file_is_one_line_naming_the_file_and_the_key(tmp_path, text, said):
    path = tmp_path / "job.yaml"
    path.write_text(text)
    with pytest.raises(RunSpecError) as caught:
        resolve_run({}, {}, path)
    assert said.format(path=path) in str(caught.value)
    assert "\n" not in str(caught.value)


def test_an_unreadable_file_names_itself(tmp_path):
    with pytest.raises(RunSpecError, match="cannot read it"):
        read_job_file(tmp_path / "missing.yaml")
    (tmp_path / "bad.toml").write_text("agent = \n")
    with pytest.raises(RunSpecError, match="not valid TOML"):
        read_job_file(tmp_path / "bad.toml")


@pytest.mark.e2e
def test_a_job_file_runs_flags_override_it_and_its_job_yaml_resumes_the_job(
        run_cli, make_task, tmp_path):
    alpha = make_task("alpha")
    make_task("beta")
    configs = tmp_path / "configs"
    configs.mkdir()
    job_file = configs / "job.yaml"
    job_file.write_text(f"# a job\nagent: oracle\ntasks: {alpha.parent}\njobs_dir: ../jobs\n"
                        "job_name: from-file\nn_attempts: 1\ninclude: [alpha]\n"
                        "image_cache_max_gb: 5\nquiet: true\n")
    proc = run_cli("run", "--config", str(job_file), "-k", "2", "--include", "beta",
                   env={"SANDLOT_IMAGE_CACHE_MAX_GB": "7"}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = tmp_path / "jobs" / "from-file"  # jobs_dir relative to the file
    assert sorted(p.parent.name for p in job.glob("*/result.json")) == ["beta__1", "beta__2"]
    kept = yaml.safe_load((job / "job.yaml").read_text())
    assert kept["n_attempts"] == 2 and kept["include"] == ["beta"]
    assert kept["image_cache_max_gb"] == 5.0  # the file's key beats the environment
    assert kept["tasks"] == [str(alpha.parent)] and kept["jobs_dir"] == str(job.parent)
    assert kept["job_name"] == "from-file"
    config = json.loads((job / "config.json").read_text())
    assert config["n_attempts"] == 2 and config["task_names"] == ["beta"]
    before = {p: p.read_bytes() for p in job.glob("*/result.json")}

    # The kept file resumes the job from anywhere: nothing reruns.
    again = run_cli("run", "--config", str(job / "job.yaml"), "--json", cwd=REPO_ROOT)
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads(again.stdout)["summary"]["n_trials"] == 2
    assert "2 resumed" in again.stderr
    assert {p: p.read_bytes() for p in job.glob("*/result.json")} == before

    # A setting that decides what the job measures cannot change on resume.
    changed = run_cli("run", "--config", str(job / "job.yaml"), "--timeout-multiplier", "2")
    assert changed.returncode == 2
    assert "timeout_multiplier" in changed.stdout + changed.stderr


@pytest.mark.e2e
def test_the_agent_may_come_from_the_file_and_a_missing_one_is_said(run_cli, make_task,
                                                                     tmp_path):
    task = make_task("alpha")
    proc = run_cli("run", str(task))
    assert proc.returncode == 2
    assert "no agent named: give --agent NAME" in proc.stdout + proc.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("agent: oracle\nsandbox: k8s\n")
    proc = run_cli("run", str(task), "--config", str(bad))
    assert proc.returncode == 2
    assert f"sandbox in {bad} 'k8s': use one of" in proc.stdout + proc.stderr


REPO_ROOT = Path(__file__).resolve().parents[1]
