"""The docker sandbox: one container (plus a compose task's services) per trial.

The main container runs the image's ENTRYPOINT with the idle command (IDLE_COMMAND) as
its arguments, as Harbor does, with the task's cpus/memory/pids limits. Commands are Engine
API execs; what one leaves running lives on until the sandbox stops, as in the local
sandbox. Each carries a mark in its environment (SANDLOT_EXEC_ID), so when it times out
every process it started is found in /proc and killed. A command with folders of its own
(the verifier's /tests and /logs/verifier) is not an exec: sandlot joins the container from
the host (container_join.py), so what the agent left running cannot reach them. Network
per phase: the container is attached to its own bridge network only while a command asks
for "outbound"; otherwise it has loopback alone (and, for a compose task, the private
network of its services). The gateway listens in the container's network namespace,
/proc/<init pid>/ns/net.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import secrets
import shlex
import signal
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from typing_extensions import override

from sandlot.errors import ContainerExited, SandboxError, Unverifiable
from sandlot.hostguard import child_pids, remove_tree
from sandlot.sandbox import container_join, egress
from sandlot.sandbox.base import (
    DEFAULT_PATH,
    EnvironmentInfo,
    ExecResult,
    LimitKind,
    Network,
    SandboxSpec,
    allowed_networks,
    check_mount_points,
    goes_outbound,
    mount_point_chain,
)
from sandlot.sandbox.bounded_fs import DEFAULT_WALK_LIMITS, WalkLimits
from sandlot.sandbox.changes import Change
from sandlot.sandbox.docker_compose import Service
from sandlot.sandbox.docker_engine import (
    EXEC_MARK,
    OWNER_LABEL,
    ROLE_LABEL,
    TRIAL_LABEL,
    CgroupCounters,
    Engine,
    ExecStream,
    kill_marked,
    limit_between,
    proc_visible,
    wait_pid_exit,
)
from sandlot.sandbox.docker_storage import StorageWatch, writable_layer_bytes
from sandlot.sandbox.local import resolve_inside
from sandlot.sandbox.procutil import CappedReader
from sandlot.sandbox.seccomp import sandbox_filter_program

#: The main container's command (the ENTRYPOINT's arguments, PID 1 without one): idles
#: until commands are exec'd into it, as Harbor's `sleep infinity`, and reaps what is
#: reparented to it (the shell waits with waitpid(-1)). As PID 1 it ignores every signal
#: sent from inside, so `kill -9 -1` in a command cannot stop the container (the engine's
#: init would exit with its child).
IDLE_COMMAND = ["/bin/sh", "-c", "while :; do sleep 3600; done"]
#: How long an image's ENTRYPOINT may take to show it runs (it has started a process).
ENTRYPOINT_SETTLE_SEC = 2.0
#: How long a command's output is still read after it exited while a process it left
#: running holds its stdout or stderr open.
OUTPUT_GRACE_SEC = 0.25
#: rlimits for engines that cannot raise them (no CAP_SYS_RESOURCE, e.g. nested in a
#: sandbox): used after a container failed to start with the engine's defaults.
LOW_ULIMITS = (("nofile", 4096, 4096), ("nproc", 4096, 4096))
#: Paths sandlot itself (or the engine) writes: never reported as the trial's changes.
SETUP_PATHS = ("/logs", "/tests", "/solution", "/etc/resolv.conf", "/etc/hosts",
               "/etc/hostname", "/run", "/dev", "/proc", "/sys")
DIFF_KINDS: dict[int, Literal["added", "modified", "deleted"]] = {
    0: "modified", 1: "added", 2: "deleted"}


def _slug(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_.-]+", "-", name).strip("-.").lower()[:40] or "trial"


def _rlimit_error(exc: Exception) -> bool:
    return "rlimit" in str(exc).lower()


@dataclass
class ContainerSetup:
    """Everything the backend resolved for one sandbox (images built, compose read)."""

    image: str
    owner: str
    #: Environment the container starts with (on top of its image's).
    env: dict[str, str] = field(default_factory=dict)
    #: A compose task's other services with their images, in start order.
    services: list[tuple[Service, str]] = field(default_factory=list)
    #: Named volumes of a compose task, and the main service's own mounts.
    volumes: list[str] = field(default_factory=list)
    main_binds: list[tuple[str, str, bool]] = field(default_factory=list)
    main_depends_on: dict[str, str] = field(default_factory=dict)
    runtime: str | None = None
    #: Seconds a compose service may take to become healthy.
    health_timeout_sec: float = 300.0
    #: The image the main container's image is built on (or is): what results name.
    base_image: str | None = None
    #: `SecurityOpt` of every container: the engine's seccomp profile with sandlot's
    #: denials (engine_seccomp.py); empty where the engine's own default has them.
    security_opt: list[str] = field(default_factory=list)


class DockerProcess:
    """A command started with piped stdio; killing it kills everything it started, what
    it leaves running when it exits lives on."""

    def __init__(self, sandbox: DockerSandbox, stream: ExecStream, mark: str, pid: int,
                 before: tuple[int, int], disk_before: int) -> None:
        self._sandbox = sandbox
        self._stream = stream
        self._mark = mark
        self._pid = pid
        self._before = before
        self._disk_before = disk_before
        self._filled_disk = False
        self.stdin = stream.stdin
        self.stdout = stream.stdout
        self.stderr = stream.stderr
        self._returncode: int | None = None
        self._done = asyncio.ensure_future(self._watch())

    @property
    def returncode(self) -> int | None:
        return self._returncode

    async def _watch(self) -> None:
        exited = False
        try:
            await self._sandbox._wait_main(self._stream.exec_id, self._pid)
            exited = True
        finally:
            if not exited:
                await asyncio.shield(self._sandbox._reap(self._mark))
            self._filled_disk = await asyncio.shield(
                self._sandbox._command_ended(self._mark, self._disk_before))
            self._returncode = await self._sandbox._exit_code(self._stream.exec_id)
            # The rest of its output is already on its way: let it arrive, then hang up
            # (a process it left running may hold the stream open).
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._stream.pump), 2)
            self._stream.close()

    async def wait(self) -> int:
        await asyncio.shield(self._done)
        return self._returncode if self._returncode is not None else -1

    async def terminate(self) -> None:
        if self._returncode is None and self._pid > 0:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, signal.SIGTERM)

    async def kill(self) -> None:
        if self._returncode is None:
            await self._sandbox._reap(self._mark)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(self._done), 15)
        self._stream.close()

    def limit_hit(self) -> LimitKind | None:
        if self._filled_disk:
            return "disk"
        counters = self._sandbox._counters
        return limit_between(self._before, counters.read()) if counters else None  # type: ignore[return-value]


class DockerSandbox:
    """A container per trial through a Docker Engine API (Docker, or Podman's service)."""

    def oom_kills(self) -> int | None:
        """OOM kills in the container's memory cgroup so far (CountsLimitEvents)."""
        return self._counters.read()[0] if self._counters is not None else None

    def __init__(self, spec: SandboxSpec, engine: Engine, setup: ContainerSetup) -> None:
        self.spec = spec
        self.engine = engine
        self.setup = setup
        self.prefix = f"sandlot-{_slug(spec.name)}-{secrets.token_hex(3)}"
        self._container: str | None = None
        self._pid = 0
        self._pidns: str | None = None
        self._counters: CgroupCounters | None = None
        #: storage_mb, kept by measuring (docker_storage); None without one.
        self._storage: StorageWatch | None = None
        #: The marks of the commands running in the main container now.
        self._running: set[str] = set()
        self._services: list[str] = []
        self._networks: list[str] = []
        self._volumes: list[str] = []
        self._egress: str | None = None
        self._private: str | None = None
        self._egress_on = False
        self._egress_filtered = False
        #: The allowlist the egress filter has now (None: the internet).
        self._allowed: tuple[str, ...] | None = None
        self._net_lock = asyncio.Lock()
        self._stopped = False
        #: The image's ENTRYPOINT ([] without one) and the container's environment, which
        #: every exec gets (Config.Env), as does a command run through container_join.
        self._entrypoint: list[str] = []
        self._env: list[str] = []
        #: Commands run through container_join: their count names their marks.
        self._joined = 0
        #: sandlot's syscall filter for commands run through container_join (hex).
        self._join_filter: str | None = None
        #: What the container runs on, for result.json (the backend adds the digest).
        self.environment = EnvironmentInfo(base="image", image=setup.base_image)

    # -- lifecycle -----------------------------------------------------------------------

    def _labels(self, role: str) -> dict[str, str]:
        return {OWNER_LABEL: self.setup.owner, ROLE_LABEL: role, TRIAL_LABEL: self.spec.name}

    def _host_config(self, *, binds: list[tuple[str, str, bool]], memory_mb: int | None,
                     cpus: float | None, pids: int | None, network: str,
                     tmpfs: list[str] = ()) -> dict[str, Any]:  # type: ignore[assignment]
        from docker.types import Ulimit

        api = self.engine.api
        kwargs: dict[str, Any] = {
            "binds": [f"{src}:{dst}:{'ro' if ro else 'rw'}" for src, dst, ro in binds],
            "network_mode": network, "init": False,
            "tmpfs": {t.split(":", 1)[0]: (t.split(":", 1)[1] if ":" in t else "")
                      for t in tmpfs} or None,
        }
        if memory_mb:
            kwargs["mem_limit"] = f"{int(memory_mb)}m"
            kwargs["memswap_limit"] = f"{int(memory_mb)}m"
        if cpus:
            kwargs["nano_cpus"] = int(float(cpus) * 1e9)
        if pids:
            kwargs["pids_limit"] = int(pids)
        if self.setup.runtime:
            kwargs["runtime"] = self.setup.runtime
        if self.setup.security_opt:
            kwargs["security_opt"] = list(self.setup.security_opt)
        if getattr(self.engine, "low_ulimits", False):
            kwargs["ulimits"] = [Ulimit(name=n, soft=s, hard=h) for n, s, h in LOW_ULIMITS]
        return api.create_host_config(**kwargs)

    async def _run_container(self, name: str, image: str, *, role: str, command: list[str] | None,
                             entrypoint: list[str] | None, env: dict[str, str], network: str,
                             aliases: list[str], binds: list[tuple[str, str, bool]],
                             memory_mb: int | None, cpus: float | None, pids: int | None,
                             workdir: str | None = None, user: str | None = None,
                             tmpfs: list[str] = (), hostname: str | None = None,  # type: ignore[assignment]
                             ) -> str:
        """Create and start a container; returns its id (removed again if start fails)."""
        api = self.engine.api
        for attempt in (1, 2):
            # Whether this try already asks for the lowered limits: another container may
            # have switched the engine to them meanwhile, and an earlier try did not.
            low_ulimits = bool(getattr(self.engine, "low_ulimits", False))
            host_config = self._host_config(binds=binds, memory_mb=memory_mb, cpus=cpus,
                                            pids=pids, network=network, tmpfs=tmpfs)
            networking = api.create_networking_config(
                {network: api.create_endpoint_config(aliases=aliases)}) if aliases else None
            try:
                created = await self.engine.call(
                    api.create_container, image, command=command, entrypoint=entrypoint,
                    environment=env, labels=self._labels(role), name=name,
                    host_config=host_config, networking_config=networking,
                    working_dir=workdir, user=user, hostname=hostname, detach=True)
            except Exception as exc:
                raise SandboxError(f"cannot create container {name}: {exc}") from exc
            cid = str(created["Id"])
            try:
                await self.engine.call(api.start, cid)
                return cid
            except Exception as exc:
                await self._remove_container(cid)
                if attempt == 1 and _rlimit_error(exc) and not low_ulimits:
                    self.engine.low_ulimits = True  # type: ignore[attr-defined]
                    continue
                raise SandboxError(f"cannot start container {name}: {exc}") from exc
        raise SandboxError(f"cannot start container {name}")

    @override
    async def start(self) -> None:
        api = self.engine.api
        try:
            egress = await self.engine.call(
                api.create_network, f"{self.prefix}-egress", driver="bridge",
                labels=self._labels("network"))
            self._egress = str(egress["Id"])
            self._networks.append(self._egress)
            network = self._egress
            aliases: list[str] = []
            if self.setup.services:
                private = await self.engine.call(
                    api.create_network, f"{self.prefix}-net", driver="bridge", internal=True,
                    labels=self._labels("network"))
                self._private = str(private["Id"])
                self._networks.append(self._private)
                network = self._private
                aliases = ["main"]
                await self._start_services()
                await self._wait_for(self.setup.main_depends_on)
            binds = [(str(h), inside, False) for h, inside in self.spec.binds.items()]
            binds += [(self._volume(src), dst, ro) for src, dst, ro in self.setup.main_binds]
            self._container = await self._run_container(
                f"{self.prefix}-main", self.setup.image, role="sandbox", command=IDLE_COMMAND,
                entrypoint=None, env=self.setup.env, network=network, aliases=aliases,
                binds=binds, memory_mb=self.spec.memory_mb, cpus=self.spec.cpus,
                pids=self.spec.pids_max, hostname="sandbox")
            self._egress_on = network == self._egress
            info = await self.engine.call(api.inspect_container, self._container)
            self._entrypoint = list(info["Config"].get("Entrypoint") or [])
            self._env = list(info["Config"].get("Env") or [])
            self._pid = int(info["State"].get("Pid") or 0)
            if not info["State"].get("Running") or not proc_visible(self._pid):
                info = await self.engine.call(api.inspect_container, self._container)
                if not info["State"].get("Running"):  # its ENTRYPOINT exited at once
                    raise ContainerExited(await self._gone_message())
                raise SandboxError(
                    f"the container's processes are not visible here (pid {self._pid}): the "
                    "docker backend needs the engine on this host (rootful Docker or Podman)")
            self._pidns = os.readlink(f"/proc/{self._pid}/ns/pid")
            await self._settle_entrypoint()
            self._counters = CgroupCounters.of(self._pid)
            if self.spec.storage_mb:
                self._storage = StorageWatch(self._writable_layer, self.spec.storage_mb << 20,
                                             self._kill_running)
            for folder in (self.spec.workdir, *self.spec.binds.values(), *self.spec.folders):
                await self._mkdir(folder)
            await self._pin_mount_points()
        except BaseException:
            await asyncio.shield(self.stop())
            raise

    async def _settle_entrypoint(self) -> None:
        """An image's ENTRYPOINT that fails at once ends the sandbox here, before any
        command: wait until it started a process (the idle command, a service), exited,
        or ENTRYPOINT_SETTLE_SEC passed."""
        if not self._entrypoint:
            return
        deadline = time.monotonic() + ENTRYPOINT_SETTLE_SEC
        while time.monotonic() < deadline and self._alive():
            if child_pids(self._pid):
                return
            await asyncio.sleep(0.02)
        if not self._alive():
            raise ContainerExited(await self._gone_message())

    def _alive(self) -> bool:
        """Is the container's PID 1 still running (a pid reused meanwhile is not it)?"""
        try:
            same = os.readlink(f"/proc/{self._pid}/ns/pid") == self._pidns
            state = Path(f"/proc/{self._pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        return same and state != "Z"

    async def _gone_message(self) -> str:
        what = ("its PID 1, the image's ENTRYPOINT " + shlex.join(self._entrypoint)
                if self._entrypoint else "its PID 1")
        log = ""
        with contextlib.suppress(Exception):
            raw = await self.engine.call(self.engine.api.logs, self._container, tail=40)
            log = bytes(raw).decode(errors="replace")[-2000:].strip()
        return (f"the sandbox's container is gone: {what} exited"
                + (f"; its output ends: {log}" if log else " without output"))

    async def _pin_mount_points(self) -> None:
        """Make each mount point (and its parents) a folder bound onto itself, before any
        command runs: no command can then move, remove or replace it (no CAP_SYS_ADMIN in
        the container), and a verifier's folders are mounted exactly there."""
        chain = mount_point_chain(self.spec.mount_points)
        if not chain:
            return
        code, err = await self._join({"mode": "pin", "pid": self._pid, "paths": chain})
        if code != 0:
            raise SandboxError(f"cannot pin the sandbox's mount points: {err.strip()}")

    async def _join(self, request: dict[str, Any]) -> tuple[int, str]:
        """Run container_join with `request`, waiting for it (pinning: quick)."""
        proc = await _start_join(request, output=False)
        _, err = await proc.communicate()
        return int(proc.returncode or 0), err.decode(errors="replace")

    def _volume(self, source: str) -> str:
        """A compose volume name -> this trial's volume; host paths stay as they are."""
        return source if source.startswith("/") else f"{self.prefix}-{source}"

    async def _start_services(self) -> None:
        api = self.engine.api
        for source in self.setup.volumes:
            await self.engine.call(api.create_volume, self._volume(source),
                                   labels=self._labels("volume"))
            self._volumes.append(self._volume(source))
        ids: dict[str, str] = {}
        for svc, image in self.setup.services:
            await self._wait_for(svc.depends_on, ids)
            cid = await self._run_container(
                f"{self.prefix}-{_slug(svc.name)}", image, role="service",
                command=svc.command, entrypoint=svc.entrypoint, env=svc.environment,
                network=str(self._private), aliases=[svc.name],
                binds=[(self._volume(s), d, ro) for s, d, ro in svc.binds],
                memory_mb=svc.memory_mb, cpus=svc.cpus, pids=self.spec.pids_max,
                workdir=svc.working_dir, user=svc.user, tmpfs=svc.tmpfs, hostname=svc.name)
            self._services.append(cid)
            ids[svc.name] = cid
        self._service_ids = ids

    async def _wait_for(self, depends_on: dict[str, str],
                        ids: dict[str, str] | None = None) -> None:
        """Wait until each dependency is started, healthy or completed, as it asks."""
        ids = ids if ids is not None else getattr(self, "_service_ids", {})
        services = {svc.name: svc for svc, _ in self.setup.services}
        for name, condition in depends_on.items():
            cid = ids.get(name)
            if cid is None:
                continue
            if condition == "service_healthy" and services[name].healthcheck is not None:
                await self._wait_healthy(name, cid, services[name])
            elif condition == "service_completed_successfully":
                result = await self.engine.call(self.engine.api.wait, cid,
                                                timeout=self.setup.health_timeout_sec)
                if int(result.get("StatusCode", 1)) != 0:
                    raise SandboxError(f"compose service {name!r} exited "
                                       f"{result.get('StatusCode')}")

    async def _wait_healthy(self, name: str, cid: str, svc: Service) -> None:
        """Run the service's healthcheck ourselves (Podman runs none without systemd)."""
        hc = svc.healthcheck
        assert hc is not None
        deadline = time.monotonic() + max(self.setup.health_timeout_sec, hc.start_period_sec)
        failures = 0
        started = time.monotonic()
        last = ""
        while time.monotonic() < deadline:
            r = await self._exec_in(cid, hc.test, timeout_sec=hc.timeout_sec, user="")
            if r.ok:
                return
            last = (r.stdout + r.stderr).strip()[-500:]
            if time.monotonic() - started >= hc.start_period_sec:
                failures += 1
                if failures >= max(hc.retries, 1) and time.monotonic() - started > 30:
                    break
            state = await self.engine.call(self.engine.api.inspect_container, cid)
            if not state["State"].get("Running"):
                logs = await self.engine.call(self.engine.api.logs, cid, tail=40)
                raise SandboxError(f"compose service {name!r} exited "
                                   f"{state['State'].get('ExitCode')}: "
                                   f"{logs.decode(errors='replace').strip()[-1500:]}")
            await asyncio.sleep(min(hc.interval_sec, 2.0))
        raise SandboxError(f"compose service {name!r} did not become healthy: {last}")

    async def _remove_container(self, cid: str) -> None:
        with contextlib.suppress(Exception):
            await self.engine.call(self.engine.api.remove_container, cid, force=True, v=True)

    @override
    async def stop(self) -> None:
        self._stopped = True
        if self._storage is not None:
            await self._storage.close()
        container, self._container = self._container, None
        targets = ([container] if container else []) + self._services
        self._services = []
        await asyncio.gather(*(self._remove_container(c) for c in targets))
        for net in self._networks:
            with contextlib.suppress(Exception):
                await self.engine.call(self.engine.api.remove_network, net)
        self._networks = []
        for volume in self._volumes:
            with contextlib.suppress(Exception):
                await self.engine.call(self.engine.api.remove_volume, volume, force=True)
        self._volumes = []
        self._pid = 0

    # -- network -------------------------------------------------------------------------

    async def _set_network(self, network: Network) -> None:
        want, allowed = goes_outbound(network), allowed_networks(network)
        async with self._net_lock:
            if self._container is None or self._egress is None:
                return
            api = self.engine.api
            if want and allowed is not None and allowed != self._allowed:
                # An allowlist's filter goes in before the route out exists; once
                # connected it is made again with the bridge's subnet and resolver.
                await self._filter_egress(allowed)
            if want != self._egress_on:
                try:
                    if want:
                        await self.engine.call(api.connect_container_to_network,
                                               self._container, self._egress)
                    else:
                        await self.engine.call(api.disconnect_container_from_network,
                                               self._container, self._egress, force=True)
                except Exception as exc:
                    raise SandboxError(
                        f"cannot switch the network to {network}: {exc}") from exc
                self._egress_on = want
            if want and (not self._egress_filtered or allowed != self._allowed):
                # The table stays in the container's namespace across later disconnects
                # and reconnects; it is replaced when the phase's allowlist changes.
                await self._filter_egress(allowed)
                self._egress_filtered = True

    async def _filter_egress(self, allowed: tuple[str, ...] | None) -> None:
        """The egress filter (sandlot.sandbox.egress) in the container's network namespace,
        after the connect (the bridge's subnet and resolver are known only then) and
        before any outbound command. An engine whose processes this host cannot see
        (a remote DOCKER_HOST) gets none for the internet (said once in the docs, not per
        trial), and refuses an allowlist, which it could not keep."""
        if not proc_visible(self._pid):
            if allowed is not None:
                raise SandboxError("an allowlist network needs the engine's containers "
                                   "on this host (the filter goes into their network "
                                   "namespace); this engine's are not visible here")
            return
        root = Path(f"/proc/{self._pid}/root")
        try:
            resolv = resolve_inside(root, "/etc/resolv.conf").read_text(errors="replace")
        except (OSError, SandboxError):
            resolv = ""
        try:
            await egress.install(self._pid, egress.resolvers_in(resolv),
                                 self.spec.allow_private_network, allowed)
            self._allowed = allowed
        except SandboxError:
            if self._egress_on:
                with contextlib.suppress(Exception):
                    await self.engine.call(self.engine.api.disconnect_container_from_network,
                                           self._container, self._egress, force=True)
                self._egress_on = False
            raise

    @override
    def network_namespace(self) -> str | None:
        if self._container is None or not proc_visible(self._pid):
            return None
        return f"/proc/{self._pid}/ns/net"

    # -- exec ----------------------------------------------------------------------------

    async def _writable_layer(self) -> int | None:
        """The engine's size of the main container's writable layer (None: no answer)."""
        api, container = self.engine.api, self._container
        if container is None:
            return None

        def inspect_sized() -> Any:
            return api._result(api._get(api._url("/containers/{0}/json", container),
                                        params={"size": True}), True)
        try:
            return writable_layer_bytes(await self.engine.call(inspect_sized))
        except Exception:
            return None

    async def _kill_running(self) -> None:
        for mark in list(self._running):
            await self.engine.call(kill_marked, mark, self._pidns)

    def _command_started(self, mark: str) -> int:
        self._running.add(mark)
        return self._storage.started() if self._storage is not None else 0

    async def _command_ended(self, mark: str, disk_before: int) -> bool:
        """True when the container's writable layer passed storage_mb meanwhile."""
        self._running.discard(mark)
        return await self._storage.ended(disk_before) if self._storage is not None else False

    def _check_running(self) -> str:
        if self._container is None:
            raise SandboxError("sandbox is not running")
        return self._container

    async def _start_exec(self, container: str, argv: list[str], env: dict[str, str],
                          cwd: str | None, user: str | None, stdin: bool,
                          limit: int = 64 * 1024 * 1024) -> tuple[ExecStream, int]:
        """Commands in the main container run as root unless `user` says otherwise; in a
        compose service (user "") as that service's own user."""
        try:
            created = await self.engine.call(
                self.engine.api.exec_create, container, argv, stdout=True, stderr=True,
                stdin=stdin, environment=env, workdir=cwd,
                user="0" if user is None else user)
            stream = await self.engine.exec_stream(str(created["Id"]), limit)
        except SandboxError:
            raise
        except Exception as exc:
            raise SandboxError(f"cannot start the command: {exc}") from exc
        pidns = self._pidns if container == self._container else None
        pid = await self._exec_pid(stream.exec_id, pidns)
        return stream, pid

    async def _exec_pid(self, exec_id: str, pidns: str | None) -> int:
        """The host pid of an exec's main process (in `pidns`), 0 if it is already gone."""
        for _ in range(200):
            info = await self.engine.call(self.engine.api.exec_inspect, exec_id)
            pid = int(info.get("Pid") or 0)
            if not info.get("Running"):
                return 0
            if pid > 0:
                try:
                    same = pidns is None or os.readlink(f"/proc/{pid}/ns/pid") == pidns
                except OSError:
                    return 0
                return pid if same else 0
            await asyncio.sleep(0.005)
        return 0

    async def _wait_main(self, exec_id: str, pid: int) -> None:
        if pid > 0:
            await wait_pid_exit(pid)
            return
        while True:
            info = await self.engine.call(self.engine.api.exec_inspect, exec_id)
            if not info.get("Running"):
                return
            await asyncio.sleep(0.05)

    async def _reap(self, mark: str) -> None:
        """Kill what is left of one command (its background children)."""
        if self._pidns is not None:
            await self.engine.call(kill_marked, mark, self._pidns)

    async def _exit_code(self, exec_id: str) -> int | None:
        for _ in range(100):
            try:
                info = await self.engine.call(self.engine.api.exec_inspect, exec_id)
            except Exception:
                return None
            if not info.get("Running"):
                code = info.get("ExitCode")
                return int(code) if code is not None else None
            await asyncio.sleep(0.02)
        return None

    def _marked(self, extra: dict[str, str] | None, token: str) -> dict[str, str]:
        return {**(extra or {}), EXEC_MARK: token}

    @override
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
        container = self._check_running()
        if not self._alive():
            raise ContainerExited(await self._gone_message())
        await self._set_network(network)
        argv = command if isinstance(command, list) else ["bash", "-c", command]
        if mounts:
            check_mount_points(self.spec, mounts)
            return await self._exec_joined(argv, mounts, timeout_sec=timeout_sec, env=env,
                                           cwd=cwd or self.spec.workdir, user=user,
                                           max_output_bytes=max_output_bytes)
        return await self._exec_once(container, argv, timeout_sec=timeout_sec, env=env,
                                     cwd=cwd or self.spec.workdir, user=user, stdin=stdin,
                                     max_output_bytes=max_output_bytes, main=True)

    async def _exec_in(self, container: str, argv: list[str], *,
                       timeout_sec: float | None = None, env: dict[str, str] | None = None,
                       cwd: str | None = None, user: str | None = None,
                       stdin: bytes | None = None,
                       max_output_bytes: int = 8 * 1024 * 1024) -> ExecResult:
        """A command in a compose service's container (its healthcheck)."""
        return await self._exec_once(container, argv, timeout_sec=timeout_sec, env=env,
                                     cwd=cwd, user=user, stdin=stdin,
                                     max_output_bytes=max_output_bytes, main=False)

    async def _exec_once(self, container: str, argv: list[str], *, timeout_sec: float | None,
                         env: dict[str, str] | None, cwd: str | None, user: str | None,
                         stdin: bytes | None, max_output_bytes: int, main: bool) -> ExecResult:
        """One exec. In the main container what it leaves running lives on (unless it
        times out); in a service's container everything it started ends with it."""
        token = secrets.token_hex(12)
        mark = f"{EXEC_MARK}={token}"
        counters = self._counters if main else None
        before = counters.read() if counters else (0, 0)
        started = time.monotonic()
        disk_before = self._command_started(mark) if main else 0
        try:
            stream, pid = await self._start_exec(container, argv, self._marked(env, token),
                                                 cwd, user, stdin is not None)
        except BaseException:
            if main:
                await self._command_ended(mark, disk_before)
            raise
        feeder = asyncio.ensure_future(self._feed(stream, stdin))
        out = CappedReader(stream.stdout, max_output_bytes)
        err = CappedReader(stream.stderr, max_output_bytes)
        finished = False
        timed_out = False
        try:
            try:
                async with asyncio.timeout(timeout_sec):
                    await self._wait_main(stream.exec_id, pid)
                finished = True
            except TimeoutError:
                timed_out = True
        finally:
            feeder.cancel()
            if not (finished and main):  # timed out, cancelled, or a service's command
                pidns = self._pidns if main else await self._pidns_of(container)
                await asyncio.shield(self.engine.call(kill_marked, mark, pidns))
            filled = main and await asyncio.shield(self._command_ended(mark, disk_before))
        try:
            stdout, stderr = await _collect(out, err)
        finally:
            stream.close()
        code = None if timed_out else await self._exit_code(stream.exec_id)
        limit = "disk" if filled else (
            limit_between(before, counters.read()) if counters else None)
        return ExecResult(
            stdout=stdout.decode(errors="replace"), stderr=stderr.decode(errors="replace"),
            exit_code=code, duration_sec=time.monotonic() - started, timed_out=timed_out,
            limit_hit=limit, truncated=out.truncated or err.truncated,  # type: ignore[arg-type]
        )

    async def _exec_joined(self, argv: list[str], mounts: dict[str, Path], *,
                           timeout_sec: float | None, env: dict[str, str] | None,
                           cwd: str, user: str | None, max_output_bytes: int) -> ExecResult:
        """A command with folders of its own, run by container_join from the host (see
        its docstring); everything it started ends with it, as a verifier's must."""
        self._joined += 1
        token = f"{secrets.token_hex(8)}-j{self._joined}"
        environment = dict(line.split("=", 1) for line in self._env if "=" in line)
        environment.setdefault("PATH", DEFAULT_PATH)
        if user not in (None, "0", "root"):  # the user's own, from the container's passwd
            environment.pop("HOME", None)
        environment.update(self._marked(env, token))
        if self._join_filter is None:
            self._join_filter = sandbox_filter_program().hex()
        request = {"mode": "run", "pid": self._pid, "argv": argv, "env": environment,
                   "cwd": cwd, "user": user, "seccomp": self._join_filter,
                   "mounts": {inside: str(host) for inside, host in mounts.items()}}
        before = self._counters.read() if self._counters else (0, 0)
        started = time.monotonic()
        mark = f"{EXEC_MARK}={token}"
        disk_before = self._command_started(mark)
        try:
            proc = await _start_join(request, output=True)
        except BaseException:
            await self._command_ended(mark, disk_before)
            raise
        out = CappedReader(proc.stdout, max_output_bytes)
        err = CappedReader(proc.stderr, max_output_bytes)
        timed_out = False
        try:
            async with asyncio.timeout(timeout_sec):
                await proc.wait()
        except TimeoutError:
            timed_out = True
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await asyncio.shield(proc.wait())
            await asyncio.shield(self.engine.call(kill_marked, mark, self._pidns))
            filled = await asyncio.shield(self._command_ended(mark, disk_before))
        stdout, stderr = await _collect(out, err)
        if proc.returncode == container_join.EXIT_SETUP and b"sandlot: cannot" in stderr:
            raise SandboxError(stderr.decode(errors="replace").strip().splitlines()[-1])
        limit = "disk" if filled else (
            limit_between(before, self._counters.read()) if self._counters else None)
        return ExecResult(
            stdout=stdout.decode(errors="replace"), stderr=stderr.decode(errors="replace"),
            exit_code=None if timed_out else proc.returncode,
            duration_sec=time.monotonic() - started, timed_out=timed_out,
            limit_hit=limit, truncated=out.truncated or err.truncated,  # type: ignore[arg-type]
        )

    async def _pidns_of(self, container: str) -> str | None:
        with contextlib.suppress(Exception):
            info = await self.engine.call(self.engine.api.inspect_container, container)
            return os.readlink(f"/proc/{int(info['State']['Pid'])}/ns/pid")
        return None

    @staticmethod
    async def _feed(stream: ExecStream, data: bytes | None) -> None:
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            if data:
                stream.stdin.write(data)
                await stream.stdin.drain()
            stream.stdin.close()

    @override
    async def start_process(
        self,
        command: list[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        user: str | None = None,
        network: Network = "none",
        stream_limit: int = 64 * 1024 * 1024,
    ) -> DockerProcess:
        container = self._check_running()
        if not self._alive():
            raise ContainerExited(await self._gone_message())
        await self._set_network(network)
        token = secrets.token_hex(12)
        mark = f"{EXEC_MARK}={token}"
        before = self._counters.read() if self._counters else (0, 0)
        disk_before = self._command_started(mark)
        try:
            stream, pid = await self._start_exec(container, command, self._marked(env, token),
                                                 cwd or self.spec.workdir, user, True,
                                                 stream_limit)
        except BaseException:
            await self._command_ended(mark, disk_before)
            raise
        return DockerProcess(self, stream, mark, pid, before, disk_before)

    # -- files ---------------------------------------------------------------------------

    @override
    async def upload(self, local: Path, remote: str) -> None:
        container = self._check_running()
        if not local.exists() and not local.is_symlink():
            raise SandboxError(f"cannot copy {local}: it does not exist")
        target = PurePosixPath("/", remote)
        await self._remove(str(target))
        await self._mkdir(str(target.parent))
        archive = await self.engine.call(_tar_of, local, target.name)
        try:
            ok = await self.engine.call(self.engine.api.put_archive, container,
                                        str(target.parent), archive)
        except Exception as exc:
            raise SandboxError(f"cannot copy {local} to {remote}: {exc}") from exc
        finally:
            archive.close()
        if not ok:
            raise SandboxError(f"cannot copy {local} to {remote}")

    @override
    async def download(self, remote: str, local: Path) -> None:
        container = self._check_running()
        await self._download_from(container, remote, local)

    async def _download_from(self, container: str, remote: str, local: Path) -> None:
        from docker.errors import NotFound

        try:
            stream, _ = await self.engine.call(self.engine.api.get_archive, container, remote)
            spool = await self.engine.call(_spool, stream)
        except NotFound as exc:
            raise SandboxError(f"cannot copy {remote}: it does not exist") from exc
        except Exception as exc:
            raise SandboxError(f"cannot copy {remote}: {exc}") from exc
        try:
            await self.engine.call(_extract_to, spool, local)
        finally:
            spool.close()

    async def _remove(self, remote: str) -> None:
        """Deleted from the host side, symlinks on the way resolved inside the container."""
        await self.engine.call(remove_tree, self.host_path(remote))

    async def _mkdir(self, remote: str) -> None:
        """Created from the host side like `remove`: a planted link to a missing folder gets
        its target created inside the container, never on the host."""
        try:
            await self.engine.call(self.host_path(remote).mkdir, parents=True, exist_ok=True)
        except OSError as exc:
            raise SandboxError(f"cannot create {remote}: {exc}") from exc

    def host_path(self, sandbox_path: str) -> Path:
        """Where `sandbox_path` is readable from the host (through the container's root),
        symlinks resolved inside the container."""
        if self._container is None or not proc_visible(self._pid):
            raise SandboxError("sandbox not started")
        return resolve_inside(Path(f"/proc/{self._pid}/root"), sandbox_path)

    @override
    async def changes(self, limits: WalkLimits = DEFAULT_WALK_LIMITS) -> list[Change]:
        """The engine's own list of what changed in the container (its overlay's upper
        layer, read by the engine, not by sandlot). An engine that will not answer, or a
        list longer than the walk limit, is Unverifiable: the trial fails closed."""
        container = self._check_running()
        try:
            diff = await asyncio.wait_for(
                self.engine.call(self.engine.api.diff, container), limits.max_seconds)
        except Exception as exc:
            raise Unverifiable(f"the engine did not list the container's changes "
                               f"({type(exc).__name__}: {exc})", "/") from exc
        if len(diff or []) > limits.max_entries:
            raise Unverifiable(f"more than {limits.max_entries} changed entries", "/")
        ignore = (*SETUP_PATHS, *self.spec.binds.values())
        out: list[Change] = []
        for item in diff or []:
            path = str(item.get("Path", ""))
            if any(path == p or path.startswith(p.rstrip("/") + "/") for p in ignore):
                continue
            kind = DIFF_KINDS.get(int(item.get("Kind", 0)), "modified")
            out.append(Change(path, kind))
        return out

    @override
    async def restore(self, remote: str) -> None:
        """Copy the image's version of `remote` back in, or remove it if the image has none."""
        from docker.errors import NotFound

        self._check_running()
        api = self.engine.api
        scratch = Path(tempfile.mkdtemp(prefix="sandlot-restore-"))
        probe = None
        try:
            probe = str((await self.engine.call(
                api.create_container, self.setup.image, command=["true"], entrypoint=[],
                labels=self._labels("probe")))["Id"])
            try:
                await self._download_from(probe, remote, scratch / "original")
            except SandboxError as exc:
                if not isinstance(exc.__cause__, NotFound):
                    raise
                await self._remove(remote)
                return
            await self.upload(scratch / "original", remote)
        finally:
            if probe is not None:
                await self._remove_container(probe)
            remove_tree(scratch, ignore_errors=True)


async def _start_join(request: dict[str, Any], *, output: bool) -> asyncio.subprocess.Process:
    """container_join (stdlib only: the host's Python with -I -S) given `request`; its
    stderr piped, its stdout too with `output`."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-I", "-S", container_join.__file__, json.dumps(request),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE if output else asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE, env={"PATH": DEFAULT_PATH})


async def _collect(out: CappedReader, err: CappedReader) -> tuple[bytes, bytes]:
    """Both streams of a finished command, read together: a process it left running may
    hold both open, and each gets the same OUTPUT_GRACE_SEC, not one after the other."""
    stdout, stderr = await asyncio.gather(out.collect(OUTPUT_GRACE_SEC),
                                          err.collect(OUTPUT_GRACE_SEC))
    return stdout, stderr


def _tar_of(local: Path, name: str) -> Any:
    """A tar (in a temp file) holding `local` as `name`, owned by root."""
    spool = tempfile.TemporaryFile()  # noqa: SIM115 (the caller closes it)

    def as_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        return info

    with tarfile.open(fileobj=spool, mode="w") as tar:
        tar.add(str(local), arcname=name, recursive=True, filter=as_root)
    spool.seek(0)
    return spool


def _spool(stream: Any) -> Any:
    spool = tempfile.TemporaryFile()  # noqa: SIM115 (the caller closes it)
    for chunk in stream:
        spool.write(chunk)
    spool.seek(0)
    return spool


def _safe_member(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """tarfile's "data" filter, but a link pointing outside is skipped, not fatal."""
    try:
        return tarfile.data_filter(member, dest)
    except tarfile.FilterError:
        return None


def _extract_to(spool: Any, local: Path) -> None:
    """The archive's single top entry becomes `local` (replacing what is there)."""
    local.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".sandlot-dl-", dir=local.parent))
    try:
        with tarfile.open(fileobj=spool, mode="r|") as tar:
            tar.extractall(staging, filter=_safe_member)
        entries = list(staging.iterdir())
        if len(entries) != 1:
            raise SandboxError(f"unexpected archive from the engine ({len(entries)} entries)")
        remove_tree(local)
        os.replace(entries[0], local)
    finally:
        remove_tree(staging, ignore_errors=True)
