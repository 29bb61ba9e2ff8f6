"""The sandbox plane: a small Protocol every backend (local, docker, remote) implements."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from sandlot.errors import SandboxError


@dataclass(frozen=True)
class Allowlist:
    """Outbound to these address ranges only (a task's `allowed_hosts`, its names resolved
    when the trial started), plus the sandbox's loopback and its resolver's DNS."""

    networks: tuple[str, ...]


#: none and loopback: the sandbox's own loopback only, shared by all its commands (where
#: sandlot serves the model gateway, and where a server the agent started is reached);
#: outbound: loopback plus NAT to the internet (never the host's own loopback); an
#: Allowlist: outbound to its addresses alone.
Network = Literal["none", "loopback", "outbound"] | Allowlist


def goes_outbound(network: Network) -> bool:
    """The command needs NAT out of the sandbox (the internet, or part of it)."""
    return network == "outbound" or isinstance(network, Allowlist)


def allowed_networks(network: Network) -> tuple[str, ...] | None:
    """The egress filter's allowlist for `network`: None is the whole internet."""
    return network.networks if isinstance(network, Allowlist) else None

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


#: A kernel or quota limit a command ran into.
LimitKind = Literal["memory", "pids", "disk"]


@dataclass(frozen=True)
class ExecResult:
    stdout: str
    stderr: str
    exit_code: int | None
    duration_sec: float
    timed_out: bool = False
    limit_hit: LimitKind | None = None
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


@dataclass(frozen=True)
class SandboxSpec:
    """What a sandbox looks like from inside, independent of the backend."""

    name: str
    workdir: str
    env: dict[str, str] = field(default_factory=dict)
    memory_mb: int | None = None
    cpus: float | None = None
    pids_max: int | None = 4096
    #: Disk quota in MB for everything the sandbox writes (task.toml storage_mb).
    storage_mb: int | None = None
    #: Outbound network may reach private and link-local ranges (a LAN mirror); the host's
    #: own addresses stay out of reach either way (sandlot.sandbox.egress).
    allow_private_network: bool = False
    #: Host folders bound into the sandbox (host path -> sandbox path), e.g. /logs/agent.
    binds: dict[Path, str] = field(default_factory=dict)
    #: Host paths hidden inside the sandbox (the tasks, jobs and cache folders).
    masked_paths: tuple[Path, ...] = ()
    #: Read-only layers (oldest last) stacked over the base image, e.g. a cached build.
    layers: tuple[Path, ...] = ()
    #: The image the sandbox's root is made of, its unpacked layers oldest first (the
    #: local backend; none: the host's own root, with its private parts hidden).
    root_layers: tuple[Path, ...] = ()
    #: The environment the image's config sets (its Env), under `env`; None: the usual
    #: PATH and LANG of a Debian image (a sandbox on the host's root).
    base_env: dict[str, str] | None = None
    #: Paths of the host's root that a sandbox on it lacks (e.g. Python's
    #: EXTERNALLY-MANAGED, absent from a python: image), and links it gains where the
    #: host has nothing (path -> target): what a host-fallback adds to look like the image.
    removed_paths: tuple[str, ...] = ()
    added_links: dict[str, str] = field(default_factory=dict)
    #: Folders made (as root, from the host) when the sandbox starts, e.g. /logs/agent.
    folders: tuple[str, ...] = ()
    #: Where a command may mount host folders of its own (exec `mounts`): the verifier's
    #: /tests and /logs/verifier. Fixed at start, so no command can move them.
    mount_points: tuple[str, ...] = ()
    #: The image's ENTRYPOINT, run by the sandbox's PID 1 before it idles (given the idle
    #: command as its arguments unless entrypoint_takes_args is False: a shell-form one),
    #: as the image's USER (entrypoint_user; None: root). A service the image starts runs.
    entrypoint: tuple[str, ...] = ()
    entrypoint_takes_args: bool = True
    entrypoint_user: str | None = None


#: What a local sandbox's root is: the task's image, the host's root because the task
#: names no image (or --image-policy host), or the host's root because the image could
#: not be had (a registry out of reach).
BaseKind = Literal["image", "host", "host-fallback"]


@dataclass(frozen=True)
class EnvironmentInfo:
    """What a trial's sandbox was made of, for result.json: results on different roots
    (another image digest, the host's root) are not comparable, and the user must see it."""

    base: BaseKind
    #: The image the task names (after --base-image-override), if any.
    image: str | None = None
    #: The manifest digest the trial ran on.
    digest: str | None = None
    #: Why the trial is not on its image (base host-fallback), in one line.
    reason: str | None = None
    #: On a host-fallback of a `python:X.Y` image: the Python version that ran instead.
    python: str | None = None
    #: The working folder the image set, when the task left it to the image.
    workdir: str | None = None
    #: The user the image runs as (`user[:group]`, its base image's USER included), when
    #: not root: the agent and the verifier run as it unless task.toml names another.
    user: str | None = None

    def as_dict(self) -> dict[str, str]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@runtime_checkable
class DescribesEnvironment(Protocol):
    """A sandbox that knows what its root is made of (see EnvironmentInfo)."""

    environment: EnvironmentInfo


@runtime_checkable
class KnowsItsPristineState(Protocol):
    """A sandbox whose state at start is fully decided by what made it.

    `pristine_key` is equal for two sandboxes exactly when their files at start are the
    same (the same layers, image, environment/ digest, masks and links, and nothing of
    theirs ran yet, such as an image's ENTRYPOINT); None when that cannot be said. What is
    measured of one pristine sandbox (the verifier's machinery) then holds for the other.
    """

    pristine_key: str | None


def check_mount_points(spec: SandboxSpec, paths: Iterable[str]) -> None:
    """A command's own mounts (exec `mounts`) go only where the spec said."""
    for path in paths:
        if path.rstrip("/") not in spec.mount_points:
            raise SandboxError(f"cannot mount at {path}: not one of the sandbox's mount "
                               f"points ({', '.join(spec.mount_points) or 'none'})")


def mount_point_chain(points: Iterable[str]) -> list[str]:
    """Mount points and their parents, parents first: what a sandbox pins at start."""
    chain: list[str] = []
    for point in points:
        parts = [p for p in point.split("/") if p]
        for depth in range(1, len(parts) + 1):
            path = "/" + "/".join(parts[:depth])
            if path not in chain:
                chain.append(path)
    return sorted(chain, key=lambda p: p.count("/"))


class SandboxProcess(Protocol):
    """A long-running command inside a sandbox, talked to over its stdio (agents' RPC).

    Contract: `stdin`/`stdout`/`stderr` are asyncio streams; `terminate` asks it to stop,
    `kill` stops it and everything it started; both are safe after it exited.
    """

    stdin: Any
    stdout: Any
    stderr: Any

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...

    async def terminate(self) -> None: ...

    async def kill(self) -> None: ...

    def limit_hit(self) -> LimitKind | None:
        """A kernel limit hit since the process started, if any."""
        ...


class Sandbox(Protocol):
    """One isolated machine for one trial: six methods, everything else is a plain function
    on top (sandlot.sandbox.files) or an optional ability a backend may have (below).

    Contract: a SandboxBackend hands it out started; `exec` runs one command to completion
    (or to its timeout, after which every process it started is dead); `upload`/`download`
    copy files in and out; `stop` removes every process and every byte the sandbox created
    on the host and is safe to call twice or after a failed start.
    """

    spec: SandboxSpec

    async def exec(
        self,
        command: list[str] | str,
        *,
        timeout_sec: float | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        user: str | None = None,
        network: Network = "none",
        stdin: bytes | None = None,
        max_output_bytes: int = 8 * 1024 * 1024,
        mounts: dict[str, Path] | None = None,
    ) -> ExecResult:
        """Run `command` (argv, or a string for `bash -c`) inside the sandbox.

        What the command leaves running in the background lives on, as in a container
        (a server the agent started is there for the verifier).

        Args:
            timeout_sec: kill the command and all it started after this long.
            env: added to the sandbox's env for this command only.
            cwd: working directory; defaults to the spec's workdir.
            user: run as this user instead of root.
            network: "none"/"loopback" (the sandbox's loopback only) or "outbound" (NAT,
                host loopback unreachable).
            mounts: sandbox path (one of the spec's mount_points) -> host folder, seen by
                this command alone: no other process of the sandbox can read or write
                them, and what the command writes there is in the host folder after it.
                Such a command is scored apart: nothing it starts outlives it.
        Raises: SandboxError if the command could not be started at all.
        """
        ...

    async def start_process(
        self,
        command: list[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        user: str | None = None,
        network: Network = "none",
        stream_limit: int = 64 * 1024 * 1024,
    ) -> SandboxProcess:
        """Start `command` inside with piped stdio and return at once (for RPC agents).

        `stream_limit` bounds one line read from stdout/stderr (asyncio's default 64 KiB is
        too small for agents that put whole files in one JSON line).
        Raises: SandboxError if it could not be started.
        """
        ...

    async def upload(self, local: Path, remote: str) -> None:
        """Copy a host file or folder to `remote` (a path inside), replacing what is there.
        Raises: SandboxDiskFull when the sandbox's storage quota leaves no room."""
        ...

    async def download(self, remote: str, local: Path) -> None:
        """Copy a file or folder from inside the sandbox to the host."""
        ...

    async def stop(self) -> None:
        """Kill everything and delete the sandbox's state."""
        ...

    def network_namespace(self) -> str | None:
        """Path of the network namespace "loopback" commands share (to serve the gateway
        into), or None if the backend has none on this host."""
        ...


@runtime_checkable
class SharesFolders(Protocol):
    """A sandbox that can show a host folder without copying it (a read-only bind mount):
    an agent's install, shared by every trial. Others get a copy (files.share_folder)."""

    async def expose(self, local: Path, remote: str) -> None: ...


@runtime_checkable
class TracksChanges(Protocol):
    """A sandbox that knows what the trial changed against its environment: how planted
    hooks are found and neutralised before verification (sandlot.integrity)."""

    async def changes(self) -> list[Any]:
        """Files the trial added, modified or deleted outside what sandlot itself set up
        (sandlot.sandbox.changes.Change). Raises sandlot.errors.Unverifiable when it
        cannot tell them all (a cap hit, an engine that would not answer): a partial
        list must never pass for the whole."""
        ...

    async def restore(self, remote: str) -> None:
        """Put back the environment's own version of `remote` (or remove it if the trial
        added it)."""
        ...


@dataclass(frozen=True)
class WorkspaceDiff:
    """A unified diff of what the agent changed in its working folder; `cut` says what it
    leaves out (files past the cap, the rest past the byte budget), empty when whole."""

    text: str
    cut: list[str] = field(default_factory=list)


@runtime_checkable
class DiffsWorkspace(Protocol):
    """A sandbox that can show what the agent changed as a diff (agent/workspace.diff)."""

    async def diff(self, folder: str, max_files: int = 500,
                   max_bytes: int = 1_000_000) -> WorkspaceDiff: ...


@runtime_checkable
class CountsLimitEvents(Protocol):
    """A sandbox whose kernel limits count their events for the whole sandbox: an OOM kill
    of any process in it (the agent's own, a tool it ran, a worker it forked)."""

    def oom_kills(self) -> int | None:
        """OOM kills in the sandbox so far; None when it cannot tell."""
        ...


@dataclass(frozen=True)
class EnvironmentRequest:
    """What a trial asks a backend for: the task's environment/ folder and how to shape it."""

    spec: SandboxSpec
    environment_dir: Path
    #: Content digest of environment/, the key of any cached build.
    digest: str
    build_timeout_sec: float
    #: Host folder for build logs of this trial.
    log_dir: Path
    #: A prebuilt image to run as it is (task.toml's docker_image), instead of building
    #: environment/Dockerfile. With an empty spec.workdir, the image's own WORKDIR is the
    #: sandbox's (the sandbox's spec and EnvironmentInfo.workdir say which it was).
    image: str | None = None


class SandboxBackend(Protocol):
    """Makes sandboxes of one kind (local, docker, remote) for a job.

    Contract: `create` prepares the task's environment (building and caching what it can)
    and returns a started Sandbox; `sweep` removes what a killed earlier run left behind.
    Raises: TrialError (BUILD_FAILED, BUILD_TIMEOUT) for the task's own build problems,
    SandboxError when the backend itself cannot work.
    """

    name: str

    async def create(self, request: EnvironmentRequest) -> Sandbox: ...

    async def sweep(self) -> int: ...
