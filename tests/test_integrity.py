"""PATH shims are judged against the sandbox's own file tree, not the host's."""

from __future__ import annotations

from sandlot.integrity import find_planted_hooks
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
