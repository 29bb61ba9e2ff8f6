#!/usr/bin/env bash
# The whole test suite, as a user (or CI) runs it: `./scripts/test.sh [pytest args]`.
# The docker backend's tests talk to a Docker-compatible engine; when none answers and
# Podman is installed, this starts Podman's API service (rootful, runc) for the run.
set -euo pipefail
cd "$(dirname "$0")/.."
podman_sock=/run/podman/podman.sock
engine_answers() {
  .venv/bin/python -c "import socket,sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])" \
    "$1" 2>/dev/null
}
if [[ -z ${DOCKER_HOST:-} ]]; then
  if ! engine_answers "$podman_sock" && command -v podman >/dev/null; then
    mkdir -p "$(dirname "$podman_sock")"
    rm -f "$podman_sock"
    podman --runtime runc system service --time=0 "unix://$podman_sock" \
      >/tmp/sandlot-test-podman.log 2>&1 &
    podman_pid=$!
    trap 'kill "$podman_pid" 2>/dev/null; wait "$podman_pid" 2>/dev/null' EXIT
    for _ in $(seq 100); do [[ -S $podman_sock ]] && break; sleep 0.1; done
  fi
  export DOCKER_HOST="unix://$podman_sock"
fi
set +e
.venv/bin/python -m pytest "$@"
code=$?
set -e
# pytest exits 5 when it collected no tests: that is a broken suite here, not a pass.
if [[ $code -eq 5 ]]; then
  echo "sandlot: pytest collected no tests" >&2
  exit 1
fi
exit $code
