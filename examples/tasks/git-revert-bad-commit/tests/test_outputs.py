"""Inspect /app's git repository after the agent's revert."""
import subprocess

import pytest

REPO = "/app"
ORIGINAL_SUBJECTS = [
    "Initial calculator with add and subtract",
    "Add multiply",
    "Tidy up arithmetic helpers",
    "Add divide with zero check",
    "Document divide in README",
]
BAD_SUBJECT = "Tidy up arithmetic helpers"


def git(*args):
    r = subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True, timeout=20)
    assert r.returncode == 0, f"git {' '.join(args)} failed: {r.stderr}"
    return r.stdout


def load_at_head(path):
    ns = {}
    exec(compile(git("show", f"HEAD:{path}"), path, "exec"), ns)
    return ns


@pytest.fixture(scope="module")
def history():
    """(hash, subject) of main's first-parent history, oldest first."""
    out = git("log", "--first-parent", "--reverse", "--format=%H%x09%s", "main")
    return [tuple(l.split("\t", 1)) for l in out.splitlines()]


def test_on_main():
    assert git("rev-parse", "--abbrev-ref", "HEAD").strip() == "main"


def test_original_history_preserved(history):
    subjects = [s for _, s in history]
    assert subjects[:5] == ORIGINAL_SUBJECTS, "original commits were rewritten or removed"
    assert len(history) >= 6, "expected a new commit on top of the original history"
    # authorship/dates of the originals are intact (no rebase/amend)
    for h, _ in history[:5]:
        out = git("show", "-s", "--format=%ad %cd", "--date=raw", h)
        assert "+0000" in out and out.split()[0] == out.split()[2]
    # the bad commit really is the original one that broke subtract
    bad = dict((s, h) for h, s in history)[BAD_SUBJECT]
    assert "difference = b - a" in git("show", f"{bad}:calc.py")


def test_new_commit_references_bad_commit(history):
    bad = dict((s, h) for h, s in history)[BAD_SUBJECT]
    new = [h for h, _ in history[5:]]
    messages = "\n".join(git("show", "-s", "--format=%B", h) for h in new)
    assert bad in messages, "new commit message must reference the reverted commit's full hash"


def test_working_tree_clean():
    assert git("status", "--porcelain", "--untracked-files=no").strip() == ""


def test_head_code_works():
    calc = load_at_head("calc.py")
    assert calc["subtract"](5, 3) == 2
    assert calc["subtract"](0, 7) == -7
    assert calc["add"](2, 3) == 5
    assert calc["multiply"](4, 3) == 12
    assert calc["divide"](9, 3) == 3
    with pytest.raises(ZeroDivisionError):
        calc["divide"](1, 0)


def test_later_work_kept():
    readme = git("show", "HEAD:README.md")
    assert "`divide(a, b)` - raises `ZeroDivisionError` when `b == 0`" in readme
    assert "def test_divide" in git("show", "HEAD:test_calc.py")
    assert "difference = b - a" not in git("show", "HEAD:calc.py")
