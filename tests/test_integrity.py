"""PATH shims are judged against the sandbox's own file tree, not the host's."""

from __future__ import annotations

from sandlot.integrity import find_planted_hooks, resolve_link
from sandlot.sandbox.changes import Change


def shims(added: str, sandbox_has: set[str] | None) -> list[str]:
    exists = None if sandbox_has is None else (lambda path: path in sandbox_has)
    found = find_planted_hooks([Change(added, "added")], "/app", exists=exists)
    return [f.path for f in found]


def test_a_shim_over_a_command_only_the_image_has_is_caught() -> None:
    # /usr/bin/task-runner exists in the task's image (or layer), never on the host.
    assert shims("/usr/local/bin/task-runner", {"/usr/bin/task-runner"}) == [
        "/usr/local/bin/task-runner"]


def test_a_new_tool_is_left_alone_even_if_the_host_has_that_name() -> None:
    # The host has /usr/bin/sh; this sandbox's tree does not: nothing is shadowed there.
    assert shims("/usr/local/bin/sh", set()) == []


def test_without_a_view_of_the_sandbox_a_shim_counts_as_shadowing() -> None:
    assert shims("/usr/local/bin/anything", None) == ["/usr/local/bin/anything"]
    assert find_planted_hooks([Change("/usr/local/bin/x", "added")], "/app",
                              exists=lambda path: None)[0].reason.startswith("PATH shim")


# -- links into the verifier's own folders ----------------------------------------------------

def links(tree: dict[str, str], changed: list[str]) -> list[tuple[str, str]]:
    found = find_planted_hooks([Change(p, "added") for p in changed], "/app",
                               exists=lambda path: False, readlink=tree.get)
    return [(f.path, f.reason) for f in found]


def test_resolve_link_follows_every_link_as_the_kernel_would() -> None:
    tree = {"/bin": "usr/bin", "/app/a": "../app/b", "/app/b": "/bin/tool"}
    assert resolve_link("/app/a", tree.get) == "/usr/bin/tool"
    assert resolve_link("/app/c/../a", tree.get) == "/usr/bin/tool"
    assert resolve_link("/loop", {"/loop": "/loop"}.get) is None
    # Nothing inside /proc is read: resolution stops where it enters.
    asked: list[str] = []
    assert resolve_link("/app/x", lambda p: asked.append(p) or (
        "/proc/self/root/tests/a" if p == "/app/x" else None)) == "/proc/self/root/tests/a"
    assert not any(p.startswith("/proc") for p in asked)


def test_a_link_into_the_tests_is_found_even_in_the_workdir() -> None:
    found = links({"/app/answer.txt": "/tests/expected.txt"}, ["/app/answer.txt"])
    assert [p for p, _ in found] == ["/app/answer.txt"]
    assert "/tests/expected.txt" in found[0][1]


def test_relative_chained_and_proc_links_are_found() -> None:
    tree = {"/app/a": "../tests/x", "/app/b": "c", "/app/c": "/logs/verifier",
            "/app/d": "/proc/self/root/tests/x", "/app/e": "e"}
    assert [p for p, _ in links(tree, sorted(tree))] == [
        "/app/a", "/app/b", "/app/c", "/app/d", "/app/e"]


def test_ordinary_links_are_left_alone() -> None:
    tree = {"/app/current": "releases/2", "/app/lib": "/usr/lib/x", "/app/logs": "/logs/agent",
            "/app/testsuite": "/app/tests"}
    assert links(tree, sorted(tree)) == []
