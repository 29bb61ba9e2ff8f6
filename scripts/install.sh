#!/usr/bin/env bash
# Install everything sandlot needs on a Debian/Ubuntu machine (run as root):
# system packages for the local sandbox and the example tasks, then a venv in .venv.
set -euo pipefail
cd "$(dirname "$0")/.."

SYSTEM_PACKAGES=(bubblewrap libseccomp2 slirp4netns util-linux iproute2 nftables e2fsprogs git sqlite3 python3-pytest python3-venv tmux chromium podman runc busybox-static debootstrap skopeo umoci docker-registry)

missing=()
for pkg in "${SYSTEM_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "sandlot: need root to install: ${missing[*]}" >&2
    exit 1
  fi
  echo "sandlot: installing system packages: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PYTHON=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev]'
# Compiled now: where PYTHONDONTWRITEBYTECODE is set, each run would compile them again.
.venv/bin/python -m compileall -q src >/dev/null || true
echo "sandlot: installed into $(pwd)/.venv (run .venv/bin/sandlot --help)"
