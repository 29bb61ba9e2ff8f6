"""Running `git` to fetch one commit of one repository, and saying in one line why it failed.

Only the commands a fetch needs: a blobless, shallow clone without a checkout, a fetch
of one commit (a full fetch when the server will not hand out a commit by id), a sparse
checkout of the task folders. git never asks for a password (a private repository
without credentials fails at once instead of waiting on a prompt nobody sees), and
every command has a deadline.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from sandlot.sandbox.procutil import die_with_sandlot

#: The longest one git command may take (a large repository over a slow link).
GIT_TIMEOUT_SEC = 900.0

#: Hosts whose git server does not serve blobs lazily (Harbor skips the filter there too).
NO_BLOB_FILTER_HOSTS = ("huggingface.co",)


class GitError(Exception):
    """A git command failed: `message` is one line naming the repository."""


class MissingCommitError(GitError):
    """The repository answered but does not have the commit (rewritten history)."""


@dataclass(frozen=True)
class Git:
    """The git binary (looked up on PATH when the fetch starts) and its environment."""

    binary: str

    @classmethod
    def find(cls) -> Git:
        found = shutil.which("git")
        if found is None:
            raise GitError("git is not installed (fetching a dataset's tasks needs it): "
                           "install git, or pull the dataset on a machine that has it and "
                           "copy the cache ($SANDLOT_CACHE_DIR/datasets)")
        return cls(found)

    async def run(self, args: list[str], *, cwd: Path | None = None, stdin: str | None = None,
                  url: str) -> str:
        """Run `git args`; its stdout. A failure is a GitError naming `url` and git's
        last line of complaint."""
        env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true",
               "SSH_ASKPASS": "true", "GIT_SSH_COMMAND": os.environ.get(
                   "GIT_SSH_COMMAND", "ssh -o BatchMode=yes"), "LC_ALL": "C"}
        argv = [self.binary, "-c", "advice.detachedHead=false",
                "-c", "core.hooksPath=/dev/null", "-c", "protocol.ext.allow=never", *args]
        proc = await asyncio.create_subprocess_exec(
            *die_with_sandlot(argv), cwd=cwd, env=env,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            out, err = await asyncio.wait_for(
                proc.communicate(stdin.encode() if stdin is not None else None),
                GIT_TIMEOUT_SEC)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise GitError(f"git {args[0]} of {url} took longer than {GIT_TIMEOUT_SEC:.0f} s"
                           ) from None
        except BaseException:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            raise
        if proc.returncode != 0:
            said = complaint(err.decode(errors="replace"))
            raise GitError(f"git {args[0]} of {url} failed: {said}")
        return out.decode(errors="replace")


def complaint(stderr: str) -> str:
    """git's own reason, from its stderr: the last `fatal:`/`error:` line, else the last
    line (warnings such as "filtering not recognized" are not the reason)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    said = [line.split(":", 1)[1].strip() for line in lines
            if line.startswith(("fatal:", "error:"))]
    if said:
        return "; ".join(dict.fromkeys(said))[:300]
    return lines[-1][:300] if lines else "no message"


def wants_blob_filter(url: str) -> bool:
    return not any(host in url for host in NO_BLOB_FILTER_HOSTS)


async def clone_commit(git: Git, url: str, commit: str | None, sparse: list[str],
                       into: Path) -> str:
    """A checkout of `commit` (None: the default branch's tip) of `url` in `into`,
    holding only the `sparse` folders (all of it when one of them is `.`). Returns the
    full id of the commit checked out."""
    args = ["clone", "--quiet", "--no-checkout", "--depth", "1"]
    if wants_blob_filter(url):
        args.append("--filter=blob:none")
    await git.run([*args, "--", url, str(into)], url=url)
    if commit is not None:
        await _fetch_commit(git, url, commit, into)
    if "." not in sparse:
        patterns = "".join(f"/{path}/\n" for path in sorted(set(sparse)))
        await git.run(["sparse-checkout", "set", "--no-cone", "--stdin"], cwd=into,
                      stdin=patterns, url=url)
    target = commit or "HEAD"
    await git.run(["checkout", "--quiet", "--detach", target], cwd=into, url=url)
    return (await git.run(["rev-parse", "HEAD"], cwd=into, url=url)).strip()


async def _fetch_commit(git: Git, url: str, commit: str, into: Path) -> None:
    """The commit by its id in one shallow fetch where the server allows it, else every
    branch and tag (an abbreviated id, or a server that refuses unadvertised commits);
    a commit in neither no longer exists."""
    try:
        await git.run(["fetch", "--quiet", "--depth", "1", "origin", commit], cwd=into, url=url)
        return
    except GitError:
        pass
    await git.run(["fetch", "--quiet", "--unshallow", "--tags", "origin",
                   "+refs/heads/*:refs/remotes/origin/*"], cwd=into, url=url)
    try:
        await git.run(["rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"], cwd=into,
                      url=url)
    except GitError:
        raise MissingCommitError(f"commit {commit} is not in {url} (it may have been "
                                 "rewritten away)") from None
