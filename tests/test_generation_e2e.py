"""Generation flags through the real CLI: the built-in agent against a provider over real
HTTP, which receives the settings on every request; the job's config, each result and
the job file record them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.gateway_support import ThreadedProvider

pytestmark = [pytest.mark.e2e]

KEY = "sk-test-generation-key"
FLAGS = ("--temperature", "0.25", "--max-output-tokens", "1500", "--reasoning-effort", "high",
         "--seed", "11", "--model-kwarg", "top_p=0.5")
CHECK = """
    if [ "$(cat /app/answer.txt)" = 42 ]; then echo 1 > /logs/verifier/reward.txt
    else echo 0 > /logs/verifier/reward.txt; fi
"""


def test_every_request_reaching_the_provider_carries_the_settings(run_cli, make_task,
                                                                  tmp_path):
    make_task("answer", test_sh=CHECK)
    provider = ThreadedProvider("gw-answer")
    try:
        proc = run_cli("run", str(tmp_path / "tasks"), "-a", "builtin", "-m", "openai/m",
                       "--api-base", provider.server.base_url, *FLAGS,
                       "--jobs-dir", str(tmp_path / "jobs"), "--job-name", "j",
                       env={"OPENAI_API_KEY": KEY})
        bodies = list(provider.server.seen_bodies)
    finally:
        provider.close()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trial_bodies = [b for b in bodies if b.get("tools")]  # the preflight's check has none
    assert len(trial_bodies) == 3
    for body in trial_bodies:
        assert body["temperature"] == 0.25 and body["seed"] == 11 and body["top_p"] == 0.5
        assert body["reasoning_effort"] == "high"
        assert 1500 in (body.get("max_tokens"), body.get("max_completion_tokens"))
    job = tmp_path / "jobs" / "j"
    result = json.loads((job / "answer__1" / "result.json").read_text())
    assert result["passed"], result
    generation = result["generation"]
    assert generation["settings"] == {"temperature": 0.25, "max_output_tokens": 1500,
                                      "reasoning_effort": "high", "seed": 11,
                                      "model_kwargs": {"top_p": 0.5}}
    assert generation["n_requests_changed"] == 3 and generation["not_sent"] == []
    config = json.loads((job / "config.json").read_text())
    assert config["generation"] == generation["settings"]
    kept = (job / "job.yaml").read_text()
    assert "temperature: 0.25" in kept and "- top_p=0.5" in kept


def test_a_bad_generation_flag_is_one_line(run_cli, make_task, tmp_path):
    task = make_task("one")
    for args, said in ((("--reasoning-effort", "max"), "--reasoning-effort 'max': use one of"),
                       (("--model-kwarg", "messages=[]"), "carries the conversation"),
                       (("--temperature", "3"), "--temperature"),):
        proc = run_cli("run", str(task), "-a", "builtin", "-m", "scripted/hello", *args)
        assert proc.returncode == 2, (args, proc.stdout + proc.stderr)
        assert said in proc.stdout + proc.stderr, args
    no_model = run_cli("run", str(task), "-a", "oracle", "--seed", "1")
    assert no_model.returncode == 2 and "--seed is for the model" in no_model.stdout + \
        no_model.stderr


def test_settings_from_a_job_file(run_cli, make_task, tmp_path: Path):
    task = make_task("one")
    job_file = tmp_path / "job.yaml"
    job_file.write_text(f"agent: builtin\nmodel: scripted/hello\ntasks: [{task}]\n"
                        "temperature: 0\nmodel_kwarg: {top_p: 0.5, stop: [END]}\n"
                        "jobs_dir: jobs\njob_name: f\n")
    proc = run_cli("run", "--config", str(job_file))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    config = json.loads((tmp_path / "jobs" / "f" / "config.json").read_text())
    assert config["generation"] == {"temperature": 0.0,
                                    "model_kwargs": {"top_p": 0.5, "stop": ["END"]}}
    (record,) = [json.loads(line) for line in (
        tmp_path / "jobs" / "f" / "one__1" / "trajectory" / "llm_trajectory.jsonl"
    ).read_text().splitlines()][:1]
    assert record["request"]["temperature"] == 0 and record["request"]["stop"] == ["END"]
