"""The npm installer for agents, with a stand-in npm (no registry needed)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from sandlot.agents.install import MARKER, AgentInstallError, install_npm_package

FAKE_NPM = r"""#!/bin/bash
# Stand-in npm: `npm install --prefix DIR ... PKG@VER`, counted in $FAKE_NPM_LOG.
echo "$@" >> "$FAKE_NPM_LOG"
prefix=""; spec=""
while [[ $# -gt 0 ]]; do
  case "$1" in --prefix) prefix="$2"; shift 2 ;; *) spec="$1"; shift ;; esac
done
if [[ -n "$FAKE_NPM_FAIL" ]]; then
  echo "npm error code E404" >&2; echo "npm error 404 No match for $spec" >&2; exit 1
fi
sleep 0.3
pkg="${spec%@*}"; ver="${spec##*@}"
mkdir -p "$prefix/node_modules/$pkg"
echo "{\"name\": \"$pkg\", \"version\": \"$ver\"}" > "$prefix/node_modules/$pkg/package.json"
"""


@pytest.fixture
def fake_npm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("npm", FAKE_NPM), ("node", "#!/bin/sh\nexit 0\n")):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "npm.log"
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_NPM_LOG", str(log))
    return log


def test_a_version_is_installed_once_even_by_concurrent_installs(fake_npm, tmp_path):
    cache = tmp_path / "cache"

    async def twice() -> list[Path]:
        return list(await asyncio.gather(
            install_npm_package(cache, "demo", "@scope/demo-agent", "1.2.3"),
            install_npm_package(cache, "demo", "@scope/demo-agent", "1.2.3")))

    first, second = asyncio.run(twice())
    assert first == second == cache / "agents" / "demo" / "1.2.3"
    assert (first / "node_modules" / "@scope" / "demo-agent" / "package.json").is_file()
    marker = json.loads((first / MARKER).read_text())
    assert marker["version"] == "1.2.3" and marker["package"] == "@scope/demo-agent"
    assert asyncio.run(install_npm_package(cache, "demo", "@scope/demo-agent", "1.2.3")) == first
    (call,) = fake_npm.read_text().splitlines()
    assert "--no-audit" in call and "--no-fund" in call and "--omit=dev" in call
    assert list((cache / "agents" / "demo").glob(".tmp-*")) == []


def test_a_failed_install_says_what_npm_said_and_leaves_nothing(fake_npm, tmp_path,
                                                                monkeypatch):
    monkeypatch.setenv("FAKE_NPM_FAIL", "1")
    cache = tmp_path / "cache"
    with pytest.raises(AgentInstallError) as info:
        asyncio.run(install_npm_package(cache, "demo", "demo-agent", "9.9.9"))
    message = str(info.value)
    assert "npm install demo-agent@9.9.9" in message and "exit 1" in message
    assert "No match for demo-agent@9.9.9" in message
    assert list((cache / "agents" / "demo").iterdir()) == [
        cache / "agents" / "demo" / ".9.9.9.lock"]


def test_missing_node_or_npm_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(AgentInstallError, match=r"install Node\.js 20\+ and npm"):
        asyncio.run(install_npm_package(tmp_path / "cache", "demo", "demo-agent", "1.0.0"))


@pytest.mark.parametrize("version", ["../../etc", "1.0 || 2.0", "--global", ""])
def test_versions_that_are_not_versions_are_refused(fake_npm, tmp_path, version):
    with pytest.raises(AgentInstallError, match="exact version"):
        asyncio.run(install_npm_package(tmp_path / "cache", "demo", "demo-agent", version))
    assert not fake_npm.exists()


def test_leftovers_of_a_killed_install_are_cleared(fake_npm, tmp_path):
    folder = tmp_path / "cache" / "agents" / "demo"
    (folder / ".tmp-1.0.0-123-456" / "node_modules").mkdir(parents=True)
    (folder / "1.0.0" / "junk").mkdir(parents=True)  # no marker: unfinished
    target = asyncio.run(install_npm_package(tmp_path / "cache", "demo", "demo-agent", "1.0.0"))
    assert (target / MARKER).is_file() and not (target / "junk").exists()
    assert not (folder / ".tmp-1.0.0-123-456").exists()
