#!/usr/bin/env bash
# The whole test suite, as a user (or CI) runs it:
#   ./scripts/test.sh [pytest args]               one run
#   ./scripts/test.sh --repeat N [pytest args]    N runs beside a CPU hog; prints the failure rate
#
# Every run gets its own temp folder (TMPDIR, pytest's tmp_path, the sandboxes' scratch), one
# cgroup with a memory and a pids cap for everything it starts, and a time limit
# (SANDLOT_TEST_TIME_LIMIT seconds, default 2400): when the limit fires, the tests that were
# running are named. At its end the suite checks that it left the machine as it found it
# (tests/machine_check.py). With SANDLOT_TEST_RERUNS=1 (CI), a failed test runs once more; one
# that passes only then is listed on a FLAKY: line. The docker backend's tests talk to a
# Docker-compatible engine; when none answers on Podman's shared socket and Podman is installed,
# this starts Podman's API service (rootful, runc) for the run, on a socket in the run's own
# folder. See docs/development.md.
set -euo pipefail
cd "$(dirname "$0")/.."

repeat=0
if [[ ${1:-} == --repeat ]]; then
  [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || { echo "usage: $0 --repeat N [pytest args]" >&2; exit 2; }
  repeat=$2
  shift 2
fi
limit=${SANDLOT_TEST_TIME_LIMIT:-2400}
memory_cap=${SANDLOT_TEST_MEMORY_MB:-6144}
pids_cap=${SANDLOT_TEST_PIDS_MAX:-16384}

run_dir=$(mktemp -d "${TMPDIR:-/tmp}/sandlot-test.XXXXXX")
mkdir -p "$run_dir/tmp"
export SANDLOT_TEST_RUN_DIR=$run_dir
export TMPDIR=$run_dir/tmp
podman_pid=
hog_pid=
groups=()

# -- one cgroup for the run (cgroup v1 memory and pids, where writable) -----------------------
own_group() {  # the path of this shell's group in controller $1, or nothing
  awk -F: -v c="$1" '{ n = split($2, a, ","); for (i = 1; i <= n; i++) if (a[i] == c) print $3 }' \
    /proc/self/cgroup
}
join_run_groups() {
  local controller base group
  for controller in memory pids; do
    base=/sys/fs/cgroup/$controller$(own_group "$controller")
    [[ -w $base/cgroup.procs ]] || continue
    group=${base%/}/sandlot-tests-$$
    mkdir "$group" 2>/dev/null || continue
    if [[ $controller == memory ]]; then
      echo $((memory_cap * 1024 * 1024)) >"$group/memory.limit_in_bytes" || true
    else
      echo "$pids_cap" >"$group/pids.max" || true
    fi
    echo $$ >"$group/cgroup.procs"
    groups+=("$group")
  done
}
leave_run_groups() {
  # Only the groups this script made (their path ends in sandlot-tests-<this pid>): whatever
  # is still inside was started by this run, so it is killed before the group is removed.
  local group pid
  for group in "${groups[@]}"; do
    [[ $group == */sandlot-tests-$$ ]] || continue
    echo $$ >"$(dirname "$group")/cgroup.procs" 2>/dev/null || true
    if [[ $group == /sys/fs/cgroup/memory/* ]]; then
      echo "sandlot-tests: peak memory $(( $(cat "$group/memory.max_usage_in_bytes") / 1048576 )) MB" \
        "of the ${memory_cap} MB cap"
    fi
    for _ in $(seq 50); do
      # Deepest first: sandlot's own groups (sandlot/<pid>-<trial>) are inside this one.
      while read -r sub; do
        for pid in $(cat "$sub/cgroup.procs" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
        rmdir "$sub" 2>/dev/null || true
      done < <(find "$group" -depth -mindepth 0 -type d 2>/dev/null)
      [[ -d $group ]] || break
      sleep 0.1
    done
  done
}

# -- a container engine for the docker backend's tests ----------------------------------------
# An engine already answering on Podman's shared socket is used as it is. Otherwise the run
# starts its own service on a socket inside its own folder, so that two runs side by side
# (ci-local beside a --repeat) never stop each other's engine.
shared_sock=/run/podman/podman.sock
engine_answers() {
  .venv/bin/python -c "import socket,sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])" \
    "$1" 2>/dev/null
}
start_engine() {
  [[ -z ${DOCKER_HOST:-} ]] || return 0
  if engine_answers "$shared_sock"; then
    export DOCKER_HOST="unix://$shared_sock"
    return 0
  fi
  command -v podman >/dev/null || return 0
  local sock=$run_dir/podman.sock
  # Exec sessions' conmon processes linger exit_command_delay seconds (300 by default)
  # after their command ended: 190 of them were still running after a suite.
  printf '[engine]\nexit_command_delay = 5\n' >"$run_dir/containers.conf"
  # Started in the run's folder: conmon writes an "oom" file into its working folder
  # when a container is OOM-killed (it used to land in the repository).
  (cd "$run_dir" && CONTAINERS_CONF=$run_dir/containers.conf \
    exec podman --runtime runc system service --time=0 "unix://$sock") \
    >"$run_dir/podman.log" 2>&1 &
  podman_pid=$!
  export SANDLOT_TEST_ENGINE_PID=$podman_pid
  for _ in $(seq 100); do [[ -S $sock ]] && break; sleep 0.1; done
  export DOCKER_HOST="unix://$sock"
}

cleanup() {
  if [[ -n $hog_pid ]]; then kill "$hog_pid" 2>/dev/null || true; wait "$hog_pid" 2>/dev/null || true; fi
  if [[ -n $podman_pid ]]; then
    kill "$podman_pid" 2>/dev/null || true
    wait "$podman_pid" 2>/dev/null || true
  fi
  leave_run_groups
  # --one-file-system: never delete through a mount a test may have left behind.
  rm -rf --one-file-system "$run_dir" 2>/dev/null \
    || echo "sandlot-tests: could not remove $run_dir completely (a mount or an immutable file?)" >&2
}
trap cleanup EXIT
# A signal ends the script through its EXIT trap: whatever the run started is in the run's
# cgroup, and leave_run_groups kills it (pytest included) before the folder goes.
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

# sandlot's own modules compiled once: where PYTHONDONTWRITEBYTECODE is set, every `sandlot`
# the tests start would otherwise compile them again (about 0.25 s of CPU each time).
.venv/bin/python -m compileall -q src >/dev/null || true

# Runs pytest once under the time limit; prints the tests that were running if it fired.
run_pytest() {
  local code
  rm -f "$run_dir"/running-*
  set +e
  # In the background and waited for, so a signal to this script is handled at once.
  timeout --signal=TERM --kill-after=60 "$limit" .venv/bin/python -m pytest "$@" &
  wait "$!"
  code=$?
  set -e
  if [[ $code -eq 124 || $code -eq 137 ]]; then
    echo "sandlot-tests: the run hit its time limit (${limit} s); tests running then:" >&2
    cat "$run_dir"/running-* 2>/dev/null | sed 's/^/  /' >&2 || true
    code=1
  fi
  # pytest exits 5 when it collected no tests: that is a broken suite here, not a pass.
  if [[ $code -eq 5 ]]; then
    echo "sandlot-tests: pytest collected no tests" >&2
    code=1
  fi
  return "$code"
}

start_engine
join_run_groups
rerun_args=()
if [[ ${SANDLOT_TEST_RERUNS:-0} -gt 0 ]]; then
  rerun_args=(--reruns "$SANDLOT_TEST_RERUNS")
fi

if [[ $repeat -eq 0 ]]; then
  code=0
  run_pytest "${rerun_args[@]}" "$@" || code=$?
  exit "$code"
fi

# --repeat N: the same selection N times, each a fresh pytest, with one core kept busy.
python3 -c "while True: pass" &
hog_pid=$!
failed_runs=0
: >"$run_dir/failures"
for i in $(seq "$repeat"); do
  rm -f "$run_dir/failed"
  if run_pytest -q "$@" >"$run_dir/run-$i.log" 2>&1; then
    echo "sandlot-tests: run $i of $repeat passed"
  else
    failed_runs=$((failed_runs + 1))
    echo "sandlot-tests: run $i of $repeat FAILED (log: tail of $run_dir/run-$i.log below)"
    tail -n 15 "$run_dir/run-$i.log" | sed 's/^/  | /'
    cat "$run_dir/failed" >>"$run_dir/failures" 2>/dev/null || true
  fi
done
echo "sandlot-tests: $failed_runs of $repeat runs failed ($((100 * failed_runs / repeat)) %)"
if [[ -s $run_dir/failures ]]; then
  sort "$run_dir/failures" | uniq -c | sort -rn | sed 's/^/  failed runs: /'
fi
[[ $failed_runs -eq 0 ]]
