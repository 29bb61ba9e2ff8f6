"""Isolation through the real stack: an agent tries to see the host (files, processes,
environment, devices, kernel knobs), another trial running at the same time, and any
network address; a task that needs the network opts in and gets exactly that.

Every probe is a task's instruction, run by ShellAgent inside the sandbox; it writes
`name=blocked|reached` lines that test.sh copies into the verifier logs. The host side only
listens (TCP, unix and abstract sockets) and counts who got through.
"""

from __future__ import annotations

import contextlib
import secrets
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .support import (
    SHELL_AGENT,
    HostListener,
    host_ipv4,
    load,
    needs_root_sandbox,
    opt_dir,
    probe,
    run_sandlot,
    write_task,
)

pytestmark = [pytest.mark.e2e, pytest.mark.adversarial, needs_root_sandbox]

TOKEN = secrets.token_hex(6)
HOST_ENV_SECRET = f"host-env-secret-{TOKEN}"

#: Shell prelude of every probe: `check NAME COMMAND` logs reached if COMMAND succeeds.
PRELUDE = r"""
out=/app/probe.txt; : > $out
check() {  # a check that runs out of time proves nothing: it says so
  timeout 20 bash -c "$2" >/dev/null 2>&1; rc=$?
  if [ $rc = 0 ]; then echo "$1=reached" >> $out
  elif [ $rc = 124 ]; then echo "$1=timeout" >> $out
  else echo "$1=blocked" >> $out; fi
}
"""
#: A connection that times out was not made (a filtered address).
NOT_REACHED = {"blocked", "timeout"}
COPY_PROBE_SH = "cp /app/probe.txt /logs/verifier/probe.txt; echo 0 > /logs/verifier/reward.txt\n"
#: Open for writing without writing a byte: the permission check is the proof.
OPEN_W = 'python3 -c "import os, sys; os.close(os.open(sys.argv[1], os.O_WRONLY))"'


def host_view_probe(tmp: Path, jobs: Path, cache: Path, other_jobs: Path) -> str:
    return PRELUDE + rf"""
echo own > /app/own.txt
check control-own-file 'test -s /app/own.txt && test -n "$(ls -A /app)"'
check control-open-for-writing '{OPEN_W} /app/own.txt'
check control-env 'env | grep -q ^HOME=/root'
check host-root-home 'test -n "$(ls -A /root)"'
check host-home 'test -n "$(ls -A /home)"'
check host-work 'test -n "$(ls -A /work)"'
check host-shadow 'test -s /etc/shadow'
check host-ssh-keys 'for f in /etc/ssh/ssh_host_*key; do test -s $f && exit 0; done; exit 1'
check host-var-log 'test -n "$(ls -A /var/log)"'
check other-jobs-folder 'test -e {other_jobs}/old/summary.json'
check this-jobs-folder 'test -n "$(ls -A {jobs})"'
check sandlot-cache 'test -n "$(ls -A {cache})"'
check host-env 'env | grep -q {HOST_ENV_SECRET}'
check host-env-via-proc-environ 'cat /proc/[0-9]*/environ | tr "\0" "\n" \
  | grep -q {HOST_ENV_SECRET}'
check host-processes 'cat /proc/[0-9]*/cmdline | tr "\0" " " | grep -q "sandlot[.]cli"'
check host-pid-count 'test $(ls -d /proc/[0-9]* | wc -l) -gt 20'
check host-disk-device 'ls /dev/vda /dev/sda /dev/nvme0n1 /dev/xvda'
check mknod-disk 'mknod /app/disk b 253 0'
check mount-anything 'mount -t tmpfs adv /mnt'
check kernel-log 'dmesg'
check kernel-memory 'head -c 1 /proc/kcore'
check cgroup-release-agent '{OPEN_W} /sys/fs/cgroup/memory/release_agent'
check cgroup-move-out '{OPEN_W} /sys/fs/cgroup/pids/cgroup.procs'
check write-host-etc 'echo pwned > /etc/adv-{TOKEN} && test -f /etc/adv-{TOKEN}'
check write-host-tmp 'mkdir -p {tmp} && echo pwned > {tmp}/written-by-agent && \
    test -f {tmp}/written-by-agent'
check global-sysctl-core-pattern '{OPEN_W} /proc/sys/kernel/core_pattern'
check global-sysctl-drop-caches '{OPEN_W} /proc/sys/vm/drop_caches'
"""


VICTIM = rf"""
date +%s.%N > /app/t-start
echo 'victim secret' > /app/secret-{TOKEN}.txt
echo 'victim secret' > /tmp/secret-{TOKEN}.txt
echo 'victim secret' > /dev/shm/secret-{TOKEN}.txt
python3 - <<'ADV_PY' &
import socket, time
abstract = socket.socket(socket.AF_UNIX)
abstract.bind("\0adv-victim-{TOKEN}")
abstract.listen(5)
tcp = socket.socket()
tcp.bind(("127.0.0.1", 47474))
tcp.listen(5)
time.sleep(22)
ADV_PY
# Long enough for the snoop to start and finish its probes meanwhile, even on a loaded
# machine (8 s was once too short under CI load).
sleep 20
date +%s.%N > /app/t-end
"""
VICTIM_TEST_SH = """
cp /opt/adv-shared.txt /logs/verifier/shared.txt
cp /app/t-start /app/t-end /logs/verifier/
echo 0 > /logs/verifier/reward.txt
"""
SNOOP = PRELUDE + rf"""
sleep 3
date +%s.%N > /app/t-probe-start
echo own > /app/own-{TOKEN}.txt
python3 -c "import socket, time; s = socket.socket(socket.AF_UNIX); \
  s.bind('\0adv-own-{TOKEN}'); s.listen(); time.sleep(10)" &
sleep 0.5
check control-find-own 'find / \( -path /proc -o -path /sys -o -path /dev \) -prune -o \
  -name "own-{TOKEN}*" -print | grep -q .'
check control-own-abstract-socket 'python3 -c "import socket; \
  socket.socket(socket.AF_UNIX).connect(\"\0adv-own-{TOKEN}\")"'
check other-workspace-by-name 'find / \( -path /proc -o -path /sys -o -path /dev \) -prune -o \
  -name "secret-{TOKEN}*" -print | grep -q .'
check other-workspace-via-proc 'ls /proc/[0-9]*/root/app /proc/[0-9]*/root/tmp | grep -q secret'
check other-trial-pids 'for p in $(cat /sys/fs/cgroup/pids/sandlot/*victim*/cgroup.procs); do \
  ls /proc/$p/root/app | grep -q secret && exit 0; done; exit 1'
check other-dev-shm 'ls /dev/shm | grep -q secret'
check other-abstract-socket 'python3 -c "import socket; \
  socket.socket(socket.AF_UNIX).connect(\"\0adv-victim-{TOKEN}\")"'
check other-loopback-port 'echo hi > /dev/tcp/127.0.0.1/47474'
date +%s.%N > /app/t-probe-end
echo tampered > /opt/adv-shared.txt
"""
SNOOP_TEST_SH = ("cp /app/t-probe-start /app/t-probe-end /logs/verifier/\n" + COPY_PROBE_SH)
SHARED_LAYER = ("FROM debian:bookworm-slim\nWORKDIR /app\n"
                "RUN echo pristine > /opt/adv-shared.txt\n")


def net_probe(listeners: dict[str, Any]) -> str:
    lo, eth, uds = listeners["loopback"], listeners["eth0"], listeners["unix"]
    lines = [PRELUDE]
    lines.append("python3 -c 'import socket, time; s = socket.socket(); "
                 's.bind(("127.0.0.1", 47475)); s.listen(); time.sleep(30)\' &\n'
                 "sleep 0.5")
    lines.append("check control-own-loopback 'echo hi > /dev/tcp/127.0.0.1/47475'")
    lines.append(f"check host-loopback 'echo hi > /dev/tcp/127.0.0.1/{lo.port}'")
    lines.append(f"check slirp-host-alias 'echo hi > /dev/tcp/10.0.2.2/{lo.port}'")
    if listeners.get("loopback6"):
        lines.append(f"check host-loopback6 'echo hi > /dev/tcp/::1/{listeners['loopback6'].port}'")
    if eth is not None:
        lines.append(f"check host-eth0 'echo hi > /dev/tcp/{eth.address[0]}/{eth.port}'")
    lines.append("check internet-1.1.1.1 'echo hi > /dev/tcp/1.1.1.1/53'")
    lines.append("check dns 'getent hosts example.com'")
    lines.append(
        "check host-unix-socket 'python3 -c \"import socket; "
        f"socket.socket(socket.AF_UNIX).connect(\\\"{uds.address}\\\")\"'")
    lines.append(
        "check host-abstract-socket 'python3 -c \"import socket; "
        f"socket.socket(socket.AF_UNIX).connect(\\\"\\0adv-host-{TOKEN}\\\")\"'")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def listeners() -> Iterator[dict[str, Any]]:
    """Host services an escaped sandbox could reach: they count every connection."""
    with opt_dir() as opt:
        made: dict[str, Any] = {
            "loopback": HostListener(),
            "unix": HostListener(socket.AF_UNIX, str(opt / "host.sock")),
            "abstract": HostListener(socket.AF_UNIX, f"\0adv-host-{TOKEN}"),
            "eth0": None, "loopback6": None,
        }
        if (ip := host_ipv4()) is not None:
            made["eth0"] = HostListener(address=(ip, 0))
        if socket.has_ipv6:
            with contextlib.suppress(OSError):
                made["loopback6"] = HostListener(socket.AF_INET6, ("::1", 0))
        try:
            yield made
        finally:
            for listener in made.values():
                if listener is not None:
                    listener.close()


@pytest.fixture(scope="module")
def iso(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory,
        listeners: dict[str, Any]) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("iso")
    tasks, jobs, other_jobs = tmp / "tasks", tmp / "jobs", tmp / "other-jobs"
    # A finished job elsewhere on the host, as any earlier benchmark leaves behind.
    write_task(tmp / "old-tasks", "old")
    old = run_sandlot(cache_dir, "run", str(tmp / "old-tasks"), "--agent", "oracle",
                      "--jobs-dir", str(other_jobs), "--job-name", "old")
    assert old.returncode == 0, old.stdout + old.stderr
    write_task(tasks, "host-view", test_sh=COPY_PROBE_SH,
               instruction=host_view_probe(tmp, jobs, cache_dir, other_jobs))
    write_task(tasks, "victim", instruction=VICTIM, test_sh=VICTIM_TEST_SH,
               dockerfile=SHARED_LAYER, agent_timeout=60)
    write_task(tasks, "snoop", instruction=SNOOP, test_sh=SNOOP_TEST_SH,
               dockerfile=SHARED_LAYER)
    write_task(tasks, "net-none", instruction=net_probe(listeners), test_sh=COPY_PROBE_SH)
    write_task(tasks, "net-public", instruction=net_probe(listeners), test_sh=COPY_PROBE_SH,
               task_toml='[agent]\ntimeout_sec = 60\n[environment]\nnetwork_mode = "public"\n')
    proc = run_sandlot(cache_dir, "run", str(tasks), "--agent", SHELL_AGENT, "-n", "5",
                       "--jobs-dir", str(jobs), "--job-name", "iso",
                       env={"SANDLOT_ADV_HOST_SECRET": HOST_ENV_SECRET})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    hits_after_job = {name: (lst.hits if lst else None) for name, lst in listeners.items()}
    # The same public task with its network forced off from the command line.
    forced = run_sandlot(cache_dir, "run", str(tasks), "--agent", SHELL_AGENT,
                         "--include", "net-public", "--agent-network", "none",
                         "--jobs-dir", str(jobs), "--job-name", "forced-none")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    return {"tmp": tmp, "job": jobs / "iso", "forced": jobs / "forced-none",
            "hits_after_job": hits_after_job}


def probe_of(job: Path, task: str) -> dict[str, str]:
    """The probe's attempts; its controls (the same checks on its own resources) must
    have succeeded, or a 'blocked' could just be a broken check."""
    result = load(job / f"{task}__1" / "result.json")
    assert result["error"] is None, result["error"]
    seen = probe(job / f"{task}__1" / "verifier" / "logs" / "probe.txt")
    controls = {k: seen.pop(k) for k in list(seen) if k.startswith("control-")}
    assert controls and set(controls.values()) == {"reached"}, controls
    return seen


def test_the_host_is_out_of_view(iso, record):
    seen = probe_of(iso["job"], "host-view")
    known_bugs = {k: seen.pop(k) for k in list(seen)
                  if k.startswith("global-sysctl") or k == "host-env-via-proc-environ"}
    writes = {k: seen.pop(k) for k in ("write-host-etc", "write-host-tmp")}
    assert len(seen) == 19 and len(known_bugs) == 3, seen
    reached = record.attempts({f"host: {name}": value == "blocked" for name, value in seen.items()})
    assert not reached, reached
    # Writes succeed in the trial's own overlay and never reach the host.
    assert writes == {"write-host-etc": "reached", "write-host-tmp": "reached"}
    record.attempts({"write to the host's /etc": not Path(f"/etc/adv-{TOKEN}").exists(),
                     "write to a host folder": not (iso["tmp"] / "written-by-agent").exists()})
    assert not Path(f"/etc/adv-{TOKEN}").exists()
    assert not (iso["tmp"] / "written-by-agent").exists()


def test_global_kernel_settings_are_read_only(iso, record):
    seen = probe_of(iso["job"], "host-view")
    sysctls = {k: v for k, v in seen.items() if k.startswith("global-sysctl")}
    reached = record.attempts({f"kernel: {k}": v == "blocked" for k, v in sysctls.items()})
    assert not reached, reached


def test_the_host_environment_is_out_of_reach(iso, record):
    seen = probe_of(iso["job"], "host-view")
    blocked = seen["host-env-via-proc-environ"] == "blocked"
    record.attempt("host: a host variable read from /proc/1/environ (bwrap's)", blocked)
    assert blocked


def test_a_concurrent_trial_is_out_of_reach(iso, record):
    job = iso["job"]
    victim_logs = job / "victim__1" / "verifier" / "logs"
    snoop_logs = job / "snoop__1" / "verifier" / "logs"

    def stamp(path: Path) -> float:
        return float(path.read_text())

    # The snoop probed while the victim was running: otherwise the test proves nothing.
    assert stamp(victim_logs / "t-start") < stamp(snoop_logs / "t-probe-start")
    assert stamp(snoop_logs / "t-probe-end") < stamp(victim_logs / "t-end")
    seen = probe_of(job, "snoop")
    assert len(seen) == 6, seen
    reached = record.attempts({f"other trial: {k}": v == "blocked" for k, v in seen.items()})
    assert not reached, reached
    # Both trials sat on the same cached build layer; the snoop's write stayed its own.
    shared = (victim_logs / "shared.txt").read_text()
    record.attempt("other trial: write into the shared build layer", shared == "pristine\n")
    assert shared == "pristine\n"


def test_no_network_but_by_opting_in(iso, listeners, record):
    none = probe_of(iso["job"], "net-none")
    public = probe_of(iso["job"], "net-public")
    forced = probe_of(iso["forced"], "net-public")
    assert set(none) == set(public) == set(forced) and len(none) >= 6, none
    reached = record.attempts({f"network none: {k}": v in NOT_REACHED for k, v in none.items()})
    reached |= record.attempts({f"network forced none: {k}": v in NOT_REACHED
                                for k, v in forced.items()})
    # Opting in gives outbound NAT, never the host's own loopback or local sockets.
    host_only = ("host-loopback", "slirp-host-alias", "host-loopback6", "host-unix-socket",
                 "host-abstract-socket")
    reached |= record.attempts({f"network public: {k}": public[k] in NOT_REACHED
                                for k in host_only if k in public})
    assert not reached, reached
    hits = iso["hits_after_job"]
    assert hits["loopback"] == hits["unix"] == hits["abstract"] == 0
    assert hits["loopback6"] in (None, 0)
    if listeners["eth0"] is None:
        pytest.skip("the host has no non-loopback address to reach")
    # A service the host runs on its own address is out of reach even for the opted-in
    # task: outbound means the internet, and the egress filter refuses the host's
    # addresses (sandlot.sandbox.egress).
    leaked = record.attempts({"network public: host-eth0": public["host-eth0"] in NOT_REACHED,
                               "network none: host-eth0": none["host-eth0"] in NOT_REACHED,
                               "network forced none: host-eth0":
                                   forced["host-eth0"] in NOT_REACHED})
    assert not leaked, (leaked, public["host-eth0"])
    assert hits["eth0"] == 0 and listeners["eth0"].hits == 0
