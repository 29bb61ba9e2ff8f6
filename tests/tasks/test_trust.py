"""`sandlot tasks check` warns about what a task's test.sh reads that the agent can write."""

from __future__ import annotations

import pytest

from sandlot.tasks import check_task
from sandlot.tasks.trust import untrusted_reads


def found(test_sh: str, workdir: str = "/app") -> list[tuple[int, str]]:
    return [(u.line, u.what) for u in untrusted_reads(test_sh, workdir)]


def test_the_usual_harbor_test_sh_is_trusted() -> None:
    assert found("""#!/bin/bash
apt-get update && apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh
source $HOME/.local/bin/env
uvx -p 3.13 -w pytest==8.4.1 pytest /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt
else echo 0 > /logs/verifier/reward.txt; fi
""") == []
    assert found("cd /tests\npython3 -m pytest test_x.py\ngit clone https://x /tmp/y\n") == []
    assert found("git -C /app -c core.fsmonitor= -c core.hooksPath=/dev/null diff\n") == []


@pytest.mark.parametrize(("line", "what"), [
    ("bash -lc 'mytool --check'", "login shell"),
    ("su - tester -c 'id'", "login shell"),
    ("python3 -m pytest /tests/test_x.py", "python -m in the workdir"),
    ("pytest -q", "pytest on the workdir"),
    ("git diff --stat", "git in the workdir"),
    ("npm test", "project test command"),
    ("make check", "project test command"),
    ("uv run pytest /tests/test_x.py", "project test command"),
    ("pip install -r requirements.txt", "install from the workdir"),
    ("source /app/env.sh", "sources a workdir file"),
    ("bash run_tests.sh", "runs a workdir script"),
    ("cat /app/score.txt > /logs/verifier/reward.txt", "reward from the workdir"),
])
def test_each_untrusted_read_is_named_with_its_line(line: str, what: str) -> None:
    assert (2, what) in found(f"set -e\n{line}\n")


def test_the_directory_is_followed_through_cd() -> None:
    script = "cd /tests && python -m pytest t.py\ncd /app/sub\npytest -q\ncd $HOME\nmake\n"
    assert found(script) == [(3, "pytest on the workdir")]
    # The workdir is the task's: elsewhere, the same lines are about the task's files.
    assert found("git status\n", workdir="/srv/project") == [(1, "git in the workdir")]
    assert found("cd /srv\ngit status\n", workdir="/srv/project") == []


def test_tasks_check_lists_them_as_warnings(make_task) -> None:
    task = make_task("trusting", test_sh="cd /app\nbash -lc 'pytest -q' && echo 1 > "
                                         "/logs/verifier/reward.txt\n")
    assert [p for p in check_task(task) if p.file == "tests/test.sh"] == []
    warnings = [p for p in check_task(task, trust=True) if p.file == "tests/test.sh"]
    assert {p.severity for p in warnings} == {"warning"}
    assert {p.field for p in warnings} == {"login shell (line 3)",
                                           "pytest on the workdir (line 3)"}, warnings
    assert all(p.fix for p in warnings)


def test_cli_tasks_check_prints_them_and_still_passes(make_task, run_cli, tmp_path) -> None:
    make_task("login", test_sh="bash -lc 'mytool' && echo 1 > /logs/verifier/reward.txt\n")
    proc = run_cli("tasks", "check", str(tmp_path / "tasks"), timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "login/tests/test.sh [login shell (line 2)]" in proc.stdout, proc.stdout
    assert "1 tasks checked: 1 ok, 0 with errors, 1 warnings" in proc.stdout
