"""Where registries come from: a registry read over the network names remote repositories
only, and a URL that cannot be fetched falls back to its cached copy."""

from __future__ import annotations

import json

import pytest

from sandlot.datasets.registry import RegistryError, parse_registry
from sandlot.datasets.sources import (
    DEFAULT_REGISTRY_URL,
    RegistrySources,
    load_registries,
    refuse_local_sources,
)


def _registry(source: str, git_url: str | None, path: str = "t"):  # type: ignore[no-untyped-def]
    task = {"name": "t", "path": path, **({"git_url": git_url} if git_url else {})}
    return parse_registry(json.dumps([{"name": "d", "version": "1", "tasks": [task]}]), source)


@pytest.mark.parametrize("git_url", [
    "https://github.com/org/repo.git", "http://git.example/repo", "ssh://git@host/repo.git",
    "git://host/repo", "git@github.com:org/repo.git"])
def test_a_remote_registry_may_name_remote_repositories(git_url):
    refuse_local_sources(_registry("https://registry.example/r.json", git_url))


@pytest.mark.parametrize(("git_url", "path"), [
    ("file:///home/me/private-repo", "t"), ("/home/me/private-repo", "t"),
    ("../elsewhere", "t"), (None, "/home/me/tasks/t"), ("ext::sh -c evil", "t")])
def test_a_remote_registry_may_not_name_anything_on_this_machine(git_url, path):
    with pytest.raises(RegistryError, match="is on this machine"):
        refuse_local_sources(_registry("https://registry.example/r.json", git_url, path))


@pytest.mark.parametrize("source", ["http://127.0.0.1:8000/r.json", "http://localhost/r.json",
                                    "http://[::1]:9/r.json", "/srv/registry.json"])
def test_a_registry_on_this_machine_may_name_local_repositories(source):
    refuse_local_sources(_registry(source, "file:///srv/repo"))


def test_without_sources_harbors_registry_is_the_one():
    assert RegistrySources().ordered() == [DEFAULT_REGISTRY_URL]
    assert RegistrySources(urls=("https://a/r.json",)).ordered() == ["https://a/r.json"]


def test_an_unreachable_url_without_a_cached_copy_is_one_line(tmp_path):
    with pytest.raises(RegistryError) as caught:
        load_registries(RegistrySources(urls=("http://127.0.0.1:9/r.json",)), tmp_path)
    said = str(caught.value)
    assert said.startswith("registry http://127.0.0.1:9/r.json: cannot fetch it (")
    assert "no copy is cached" in said and "\n" not in said
