"""The users a task names ([agent] user, [verifier] user, USER) exist in its sandbox.

Docker refuses `exec -u name` for a name its image lacks, and runs a bare uid with no
passwd entry (no name, HOME=/): tools that look the user up (git, pip, ssh, whoami) then
fail. sandlot adds what is missing instead, as the task's author evidently meant it: the
user (first free uid from 1000, or the uid named), its group and its home folder. It runs as
root through `exec`, with only sh and awk, so every backend and image shares it.
"""

from __future__ import annotations

from typing import Any, cast

from sandlot.errors import ErrorKind, SandboxError, TrialError
from sandlot.sandbox.base import ExecResult, Sandbox, SandboxProcess

#: argv: the user specs (`name`, `uid`, `name:group`, `uid:gid`), checked by the schema.
_ADD_MISSING = r"""
set -e
next_id() { awk -F: 'BEGIN { m = 999 } $3 > m && $3 < 60000 { m = $3 } END { print m + 1 }' "$1"; }
for spec in "$@"; do
    u=${spec%%:*}; g=; case $spec in *:*) g=${spec#*:};; esac
    if [ -n "$g" ] && ! awk -F: -v g="$g" '$1 == g || $3 == g { f = 1 } END { exit !f }' \
            /etc/group; then
        case $g in *[!0-9]*) gid=$(next_id /etc/group); name=$g;; *) gid=$g; name=group$g;; esac
        echo "$name:x:$gid:" >> /etc/group
        echo "added group $name ($gid)"
    fi
    if awk -F: -v u="$u" '$1 == u || $3 == u { f = 1 } END { exit !f }' /etc/passwd; then
        continue
    fi
    case $u in
    *[!0-9]*) name=$u; uid=$(next_id /etc/passwd);;
    *) name=user$u; uid=$u;;
    esac
    gid=$uid
    if ! awk -F: -v n="$gid" '$3 == n { f = 1 } END { exit !f }' /etc/group; then
        echo "$name:x:$gid:" >> /etc/group
    fi
    echo "$name:x:$uid:$gid::/home/$name:/bin/sh" >> /etc/passwd
    mkdir -p "/home/$name"
    chown "$uid:$gid" "/home/$name"
    chmod 755 "/home/$name"
    echo "added user $name ($uid)"
done
"""


async def ensure_users(sandbox: Sandbox, users: list[str]) -> list[str]:
    """Add the users (and groups) of `users` the sandbox lacks; returns what was added.

    Raises: TrialError ENVIRONMENT_ERROR if the sandbox's /etc/passwd cannot be read or
    written (an image without sh and awk, a read-only /etc).
    """
    if not users:
        return []
    try:
        result = await sandbox.exec(["sh", "-c", _ADD_MISSING, "sh", *users], timeout_sec=60)
    except SandboxError as exc:
        raise TrialError(ErrorKind.ENVIRONMENT_ERROR, f"cannot add the task's users "
                         f"{', '.join(users)}: {exc}", "setup") from exc
    if result.exit_code != 0:
        raise TrialError(ErrorKind.ENVIRONMENT_ERROR, f"cannot add the task's users "
                         f"{', '.join(users)} (exit {result.exit_code}): "
                         f"{(result.stdout + result.stderr).strip()[-500:]}", "setup")
    return [line for line in result.stdout.splitlines() if line.startswith("added ")]


class AsUser:
    """The sandbox as one user sees it: its commands run as `user` unless a call names
    another. Everything else (files, lifecycle) is the sandbox's own, done as root.

    An agent gets this view, so none of its commands can forget the task's [agent] user.
    """

    def __init__(self, sandbox: Sandbox, user: str) -> None:
        self._sandbox = sandbox
        self.user = user

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sandbox, name)

    async def exec(self, command: list[str] | str, *, user: str | None = None,
                   **kwargs: Any) -> ExecResult:
        return await self._sandbox.exec(command, user=user or self.user, **kwargs)

    async def start_process(self, command: list[str], *, user: str | None = None,
                            **kwargs: Any) -> SandboxProcess:
        return await self._sandbox.start_process(command, user=user or self.user, **kwargs)


def as_root(sandbox: Sandbox) -> Sandbox:
    """The sandbox under a user's view: for sandlot's own steps amid the agent's (the
    verifier of a repair attempt runs as the task's verifier user, not the agent's)."""
    return sandbox._sandbox if isinstance(sandbox, AsUser) else sandbox


def as_user(sandbox: Sandbox, user: str | None) -> Sandbox:
    """`sandbox` itself for root (None), else its view for `user`."""
    return sandbox if user is None else cast(Sandbox, AsUser(sandbox, user))


#: argv: one user spec. Prints "uid gid" as `_AS_USER` (sandlot.sandbox.local) resolves them.
_IDS = r"""
u=${0%%:*}; g=; case $0 in *:*) g=${0#*:};; esac
line=$(awk -F: -v u="$u" '$1 == u || $3 == u { print $3 " " $4; exit }' /etc/passwd)
case $u in *[!0-9]*) [ -n "$line" ] || { echo "no user '$u' in /etc/passwd" >&2; exit 1; };;
    *) [ -n "$line" ] || line="$u $u";; esac
uid=${line% *}; gid=${line#* }
case $g in
'') ;;
*[!0-9]*) gid=$(awk -F: -v g="$g" '$1 == g { print $3; exit }' /etc/group)
          [ -n "$gid" ] || { echo "no group '$g' in /etc/group" >&2; exit 1; };;
*) gid=$g;;
esac
echo "$uid $gid"
"""


async def user_ids(sandbox: Sandbox, user: str) -> tuple[int, int]:
    """The uid and gid a user spec names inside the sandbox (the numbers its files carry
    on the host too: the sandbox maps no user ids).

    Raises: TrialError ENVIRONMENT_ERROR for a user or group the sandbox does not have.
    """
    result = await sandbox.exec(["sh", "-c", _IDS, user], timeout_sec=60)
    fields = result.stdout.split()
    if result.exit_code != 0 or len(fields) != 2 or not all(f.isdigit() for f in fields):
        raise TrialError(ErrorKind.ENVIRONMENT_ERROR, f"cannot look up user {user} in the "
                         f"sandbox: {(result.stderr or result.stdout).strip()[-300:]}")
    return int(fields[0]), int(fields[1])
