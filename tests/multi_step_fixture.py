"""A three-step task for the multi-step tests (local and container backends): each step
appends a line to /app/log.txt, and its tests count the lines."""

from __future__ import annotations

from pathlib import Path

from conftest import write_task

COUNT_TEST = """\
#!/bin/bash
n=$(wc -l < /app/log.txt 2>/dev/null || echo 0)
echo "lines=$n expect=$EXPECT step_tests=$(ls /tests | tr '\\n' ' ')"
if [ "$n" = "$EXPECT" ]; then echo 1 > /logs/verifier/reward.txt
else echo 0 > /logs/verifier/reward.txt; fi
"""
TASK_TOML = """\
multi_step_reward_strategy = "{strategy}"
[agent]
timeout_sec = 60
[verifier]
timeout_sec = 60
env = {{ EXPECT = "3" }}
[[steps]]
name = "create"
min_reward = 1.0
[steps.verifier]
env = {{ EXPECT = "1" }}
[[steps]]
name = "extend"
min_reward = {{ reward = 1.0 }}
[steps.verifier]
env = {{ EXPECT = "2" }}
[[steps]]
name = "finish"
"""


def three_steps(root: Path, name: str, *, strategy: str = "mean",
                extend_solution: str = "echo two >> /app/log.txt",
                dockerfile: str | None = None) -> Path:
    """create (its own tests and solution) → extend (a staged workdir and setup.sh, the
    task's tests) → finish (the task's tests and solution)."""
    task = write_task(root, name, task_toml=TASK_TOML.format(strategy=strategy),
                      solve_sh="echo three >> /app/log.txt\n", files={
                          "tests/test.sh": COUNT_TEST,
                          "steps/create/instruction.md": "Write 'one' to /app/log.txt.\n",
                          "steps/create/solution/solve.sh": "#!/bin/bash\necho one > log.txt\n",
                          "steps/create/tests/test.sh": COUNT_TEST,
                          "steps/create/tests/only-create.txt": "x\n",
                          "steps/extend/instruction.md": "Append 'two'.\n",
                          "steps/extend/solution/solve.sh": f"#!/bin/bash\n{extend_solution}\n",
                          "steps/extend/workdir/data.txt": "staged for extend\n",
                          "steps/extend/workdir/setup.sh": "echo set-up > set-up.txt\n",
                          "steps/finish/instruction.md": "Append 'three'.\n",
                      }, dockerfile=dockerfile)
    (task / "instruction.md").unlink()  # a multi-step task has none of its own
    return task
