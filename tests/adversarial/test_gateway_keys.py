"""Gateway keys under attack: an agent hunts for keys (its own and other trials') from inside
its sandbox, guesses them, knocks on every port it can see and on the gateway's host-side
port, and a finished trial's key is replayed against the live gateway.

Two agents carry the attacks: the built-in agent driven by a scripted model (the attack
comes through the model's tool calls; the key stays in sandlot's process) and a test agent
that, like Pi, holds its key inside the sandbox (adversarial.key_agent).
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from .support import (
    KEY_AGENT,
    SCRIPTS,
    load,
    needs_root_sandbox,
    popen_sandlot,
    probe,
    run_sandlot,
    wait_until,
    write_task,
)

pytestmark = [pytest.mark.e2e, pytest.mark.adversarial, needs_root_sandbox]

KEY = re.compile(r"sk-sandlot-[0-9a-f]{48}")
COPY_REPORT_SH = ("cp /app/report.txt /logs/verifier/ 2>/dev/null\n"
                  "echo 0 > /logs/verifier/reward.txt\n")

#: Run inside the sandbox by the key-holding agent: `python3 /app/k.py ROLE`.
KEYS_PY = r'''
import glob, json, os, re, sys, time, urllib.error, urllib.request
from urllib.parse import urlparse

own, url = os.environ["ADV_GATEWAY_KEY"], os.environ["ADV_GATEWAY_URL"]
host_url = os.environ["ADV_HOST_GATEWAY_URL"]
out = open("/app/report.txt", "a")


def say(name, value):
    out.write(f"{name}={value}\n")
    out.flush()


def call(base, key):
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    req = urllib.request.Request(base + "/v1/chat/completions", data=body.encode(),
                                 headers={"content-type": "application/json",
                                          "authorization": f"Bearer {key}"})
    try:
        return urllib.request.urlopen(req, timeout=5).status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return "blocked"


role = sys.argv[1]
say("control-own-key", call(url, own))
if role == "thief":
    key = re.compile(rb"sk-sandlot-[0-9a-f]{48}")
    found = set()
    for path in glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/[0-9]*/cmdline"):
        try:
            found |= set(key.findall(open(path, "rb").read()))
        except OSError:
            pass
    for root in ("/app", "/tmp", "/dev/shm", "/root", "/home", "/etc", "/logs", "/run",
                 "/var/tmp", "/opt"):
        for dirpath, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d not in ("pypi", "pypi-more", "wheels")]
            for name in files:
                try:
                    with open(os.path.join(dirpath, name), "rb") as fh:
                        found |= set(key.findall(fh.read(1 << 20)))
                except OSError:
                    pass
    others = sorted(k.decode() for k in found if k.decode() != own)
    say("other-keys", ",".join(others))
    say("other-keys-work", ",".join(str(call(url, k)) for k in others))
    port = urlparse(host_url).port
    if str(port) == url.rsplit(":", 1)[1]:
        say("host-port-is-own-port", "yes")  # a coincidence: the same number, not the host
    else:
        say("host-gateway-via-loopback", call(f"http://127.0.0.1:{port}", own))
    if "tap0" in open("/proc/net/dev").read():  # outbound: slirp's NAT is there
        say("host-gateway-via-slirp", call(f"http://10.0.2.2:{port}", own))
elif role == "wait":
    time.sleep(float(sys.argv[2]))
'''


def key_task_instruction(role: str, *args: str) -> str:
    return ("cat > /app/k.py <<'ADV_PY'\n" + KEYS_PY.strip() + "\nADV_PY\n"
            f"python3 /app/k.py {role} {' '.join(args)}\n")


def replay(base_url: str, key: str) -> int | str:
    """A chat request to the live gateway from the host, with `key`."""
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    req = urllib.request.Request(base_url + "/v1/chat/completions", data=body.encode(),
                                 headers={"content-type": "application/json",
                                          "authorization": f"Bearer {key}"})
    try:
        return urllib.request.urlopen(req, timeout=10).status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_keys_cannot_be_found_or_guessed_through_the_tool_path(cache_dir, tmp_path, record):
    """Two concurrent trials of the built-in agent; the model drives the hunt."""
    write_task(tmp_path / "tasks", "keys", test_sh=(
        "cp /app/keys.txt /logs/verifier/keys.txt; echo 0 > /logs/verifier/reward.txt"))
    proc = run_sandlot(cache_dir, "run", str(tmp_path / "tasks"), "--agent", "builtin",
                       "--model", "scripted/adv-keythief", "--scripts-dir", str(SCRIPTS),
                       "-k", "2", "-n", "2", "--jobs-dir", str(tmp_path / "jobs"),
                       "--job-name", "k")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for attempt in (1, 2):
        trial = tmp_path / "jobs" / "k" / f"keys__{attempt}"
        result = load(trial / "result.json")
        assert result["error"] is None, result["error"]
        seen = probe(trial / "verifier" / "logs" / "keys.txt")
        assert seen.get("banner") == "sandlot gateway", seen  # the control: it got through
        ports = [p for p in seen["open-ports"].split(",") if p]
        guesses = seen["guesses"].split(",")
        outcome = record.attempts({
            "find a gateway key in the sandbox": seen["keys-found"] == "0",
            "reach a port other than the trial's gateway": len(ports) == 1,
            "call the gateway without a key": seen["no-key"] == "401",
            "call the gateway with an empty key": seen["empty-key"] == "401",
        })
        assert not outcome, (outcome, seen)
        assert len(guesses) == 20
        record.attempts({f"guessed key #{i}": g == "401" for i, g in enumerate(guesses)})
        assert set(guesses) == {"401"}, guesses


def _gateway_info(trial: Path) -> dict[str, str]:
    return json.loads((trial / "agent" / "gateway.json").read_text())


def test_other_trials_keys_are_out_of_reach_and_die_with_their_trial(cache_dir, tmp_path,
                                                                    record):
    """Keys held inside the sandbox (as Pi holds them): one trial cannot find another's,
    the gateway's host-side port is unreachable, and a finished trial's key gets 401."""
    tasks, jobs = tmp_path / "tasks", tmp_path / "jobs"
    write_task(tasks, "a-victim", instruction=key_task_instruction("wait", "4"),
               test_sh=COPY_REPORT_SH)
    write_task(tasks, "b-thief", instruction=key_task_instruction("thief"),
               test_sh=COPY_REPORT_SH)
    write_task(tasks, "c-thief-public", instruction=key_task_instruction("thief"),
               test_sh=COPY_REPORT_SH,
               task_toml='[agent]\ntimeout_sec = 60\n[environment]\nnetwork_mode = "public"\n')
    write_task(tasks, "d-late", instruction=key_task_instruction("wait", "5"),
               test_sh=COPY_REPORT_SH)
    job = jobs / "keys"
    proc = popen_sandlot(cache_dir, "run", str(tasks), "--agent", KEY_AGENT,
                         "--model", "scripted/hello", "-n", "2", "--jobs-dir", str(jobs),
                         "--job-name", "keys")
    try:
        # The victim and the thief are done (their keys revoked), the late trial is running.
        assert wait_until(lambda: all((job / f"{t}__1" / "result.json").exists()
                                      for t in ("a-victim", "b-thief")), 60)
        assert wait_until(lambda: (job / "d-late__1" / "agent" / "gateway.json").exists(), 60)
        live = _gateway_info(job / "d-late__1")
        replays: dict[str, Any] = {"live key (control)": replay(live["host_base_url"],
                                                                live["key"])}
        for done in ("a-victim", "b-thief"):
            info = _gateway_info(job / f"{done}__1")
            replays[f"finished trial's key ({done})"] = replay(live["host_base_url"],
                                                               info["key"])
        replays["guessed key"] = replay(live["host_base_url"],
                                        "sk-sandlot-" + secrets.token_hex(24))
        still_running = proc.poll() is None and not (job / "d-late__1" / "result.json").exists()
    finally:
        proc.wait(timeout=120)
    assert proc.returncode == 0
    assert still_running, "the replays must hit the gateway while the job still runs"
    assert replays.pop("live key (control)") == 200
    outcome = record.attempts({f"replay a {name}": status == 401
                               for name, status in replays.items()})
    assert not outcome, replays

    keys = {t: _gateway_info(job / f"{t}__1")["key"]
            for t in ("a-victim", "b-thief", "c-thief-public", "d-late")}
    assert len(set(keys.values())) == 4 and all(KEY.fullmatch(k) for k in keys.values())
    for thief in ("b-thief", "c-thief-public"):
        result = load(job / f"{thief}__1" / "result.json")
        assert result["error"] is None and result["agent_exit_code"] == 0, result
        seen = probe(job / f"{thief}__1" / "verifier" / "logs" / "report.txt")
        assert seen["control-own-key"] == "200", seen
        others = [k for k in seen["other-keys"].split(",") if k]
        attempts = {f"{thief}: read another trial's key": not others}
        for via in ("host-gateway-via-loopback", "host-gateway-via-slirp"):
            if via in seen:
                attempts[f"{thief}: reach the gateway's host-side port ({via})"] = (
                    seen[via] == "blocked")
        outcome = record.attempts(attempts)
        assert not outcome, seen
    assert "host-gateway-via-slirp" in probe(
        job / "c-thief-public__1" / "verifier" / "logs" / "report.txt")
    # No trial's key is left anywhere a later reader would find it, apart from the test
    # agent's own gateway.json (written host-side on purpose).
    for key in keys.values():
        holders = subprocess.run(["grep", "-rl", key, str(job)], capture_output=True,
                                 text=True).stdout.split()
        assert all(h.endswith("agent/gateway.json") or h.endswith("agent/stdout.txt")
                   for h in holders), holders
