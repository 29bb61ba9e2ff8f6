"""`sandlot agents list` and `--agents-file` through the real CLI."""

from __future__ import annotations


def test_agents_list_names_every_agent(run_cli):
    proc = run_cli("agents", "list", env={"COLUMNS": "250"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ("oracle", "nop", "builtin", "pi", "claude", "codex", "gemini", "opencode",
                 "goose"):
        assert name in proc.stdout


def test_a_broken_agents_file_is_refused_up_front(run_cli, make_task, tmp_path):
    make_task("t")
    bad = tmp_path / "agents.toml"
    bad.write_text("[agents.mine]\ncommand = 42\n")
    proc = run_cli("run", str(tmp_path / "tasks"), "--agent", "mine", "--agents-file", str(bad),
                   "--jobs-dir", str(tmp_path / "jobs"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "agents.toml" in proc.stdout and "command" in proc.stdout
    assert not (tmp_path / "jobs").exists()
