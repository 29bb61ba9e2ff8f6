"""Registries in Harbor 0.26's format: reading one, and which dataset a name means."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandlot.datasets.registry import (
    RegistryError,
    newest_version,
    parse_registry,
    read_registry_file,
    resolve_dataset,
    split_ref,
)


def dataset(name: str, version: str, n: int = 1) -> dict:
    return {"name": name, "version": version, "description": f"{name} {version}",
            "tasks": [{"name": f"t{i}", "git_url": "file:///srv/repo.git",
                       "git_commit_id": "0" * 40, "path": f"tasks/t{i}"} for i in range(n)],
            "metrics": [{"type": "mean"}]}


def write_registry(path: Path, rows: list) -> Path:
    path.write_text(json.dumps(rows))
    return path


def test_a_name_without_a_version_takes_the_newest_and_says_so(tmp_path):
    reg = read_registry_file(write_registry(tmp_path / "r.json", [
        dataset("bench", "1.0"), dataset("bench", "2.0", n=3), dataset("bench", "1.10")]))
    found = resolve_dataset([reg], "bench")
    assert (found.dataset.version, found.version_from) == ("2.0", "newest")
    assert len(found.dataset.tasks) == 3 and found.source == str(tmp_path / "r.json")
    pinned = resolve_dataset([reg], "bench@1.10")
    assert (pinned.dataset.version, pinned.version_from) == ("1.10", "given")


def test_newest_is_head_then_the_highest_version_then_the_last_in_text_order():
    assert newest_version(["1.0", "head", "9.9"]) == "head"
    assert newest_version(["1.9", "1.10", "1.2rc1"]) == "1.10"
    assert newest_version(["1.0", "nightly"]) == "1.0"  # a numbered one beats a name
    assert newest_version(["alpha", "beta"]) == "beta"


def test_the_first_registry_that_has_the_name_answers(tmp_path):
    private = read_registry_file(write_registry(tmp_path / "private.json",
                                                [dataset("bench", "0.1")]))
    public = read_registry_file(write_registry(tmp_path / "public.json",
                                               [dataset("bench", "2.0"), dataset("other", "1")]))
    found = resolve_dataset([private, public], "bench")
    assert found.dataset.version == "0.1" and found.source.endswith("private.json")
    assert resolve_dataset([private, public], "other").source.endswith("public.json")


def test_an_unknown_name_names_the_closest_and_an_unknown_version_the_known_ones(tmp_path):
    reg = read_registry_file(write_registry(tmp_path / "r.json", [
        dataset("terminal-bench", "2.0"), dataset("terminal-bench", "1.10"),
        dataset("swebench-verified", "1.0")]))
    with pytest.raises(RegistryError, match="did you mean terminal-bench"):
        resolve_dataset([reg], "terminal-bnch")
    with pytest.raises(RegistryError, match=r"no version 3\.0 .*versions: 1\.10, 2\.0\)"):
        resolve_dataset([reg], "terminal-bench@3.0")


@pytest.mark.parametrize(("text", "needle"), [
    ("{not json", "not JSON (line 1"),
    ('{"name": "x"}', "expected a JSON list"),
    ('[{"name": "x", "version": "1", "tasks": [{"name": "a"}]}]', "dataset #0 (x): tasks.0.path"),
    ('[{"name": "x", "version": "1"}]', "dataset #0 (x): tasks"),
    ('[{"name": "x", "version": "1", "tasks": [{"name": "a", "git_url": "file:///r", '
     '"path": "a/../../up"}]}]', "stay inside its repository"),
    ('[{"name": "x", "version": "1", "tasks": [{"name": "a", "git_url": "file:///r", '
     '"path": "/etc"}]}]', "relative to its repository"),
])
def test_a_bad_registry_is_one_line_naming_it_and_the_entry(text, needle):
    with pytest.raises(RegistryError) as caught:
        parse_registry(text, "https://example.invalid/registry.json")
    message = str(caught.value)
    assert message.startswith("registry https://example.invalid/registry.json: ")
    assert needle in message and "\n" not in message


def test_harbor_details_are_accepted_as_harbor_writes_them():
    reg = parse_registry(json.dumps([{"name": "n", "version": 2, "description": "d",
                                      "tasks": [{"name": "local", "path": "tasks/a"}]}]), "x")
    only = reg.datasets[0]
    assert only.version == "2" and only.tasks[0].git_url is None
    assert only.ref == "n@2"


@pytest.mark.parametrize("ref", ["", "@1.0", "name@"])
def test_a_malformed_reference_is_refused(ref):
    with pytest.raises(RegistryError, match="NAME@VERSION"):
        split_ref(ref)
    assert split_ref("a@b@c") == ("a", "b@c")


def test_a_git_task_path_is_normalised_as_harbor_does():
    reg = parse_registry('[{"name": "x", "version": "1", "tasks": ['
                         '{"name": "a", "git_url": "file:///r", "path": "t/./x/../a"},'
                         '{"name": "r", "git_url": "file:///r", "path": "."},'
                         '{"name": "l", "path": "/abs/local"}]}]', "r.json")
    assert [t.path for t in reg.datasets[0].tasks] == ["t/a", ".", "/abs/local"]
