"""environment/docker-compose.yaml for the docker backend: the main service and the rest.

The main service (`main`, or `client` in Terminal-Bench 1 tasks) is the sandbox: sandlot
builds its image and runs it its own way (its command, ports and volumes are ignored).
Every other service starts beside it, in `depends_on` order, on a private network where
each answers to its service name. Compose variables are filled from sandlot's own values
(MAIN_IMAGE_NAME, CONTEXT_DIR, CPUS, MEMORY, TEST_DIR, the T_BENCH_* ones) and the
environment/.env file, never from the host's environment.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandlot.errors import ErrorKind, TrialError

COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml")
MAIN_SERVICES = ("main", "client")
#: What MAIN_IMAGE_NAME (and T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME) stand for: the image
#: sandlot builds for the main service.
MAIN_IMAGE = "sandlot-main-image"
_VAR = re.compile(r"\$(?:(\$)|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])"
                  r"(?P<word>[^}]*))?\}|(?P<plain>[A-Za-z_][A-Za-z0-9_]*))")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)")


def find_compose(environment_dir: Path) -> Path | None:
    for name in COMPOSE_FILES:
        if (environment_dir / name).is_file():
            return environment_dir / name
    return None


def _fail(message: str) -> TrialError:
    return TrialError(ErrorKind.BUILD_FAILED, f"docker-compose.yaml: {message}", "setup")


def interpolate(value: Any, variables: dict[str, str]) -> Any:
    """Compose's ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:+alt}, $$ in every string."""
    if isinstance(value, dict):
        return {k: interpolate(v, variables) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, variables) for v in value]
    if not isinstance(value, str):
        return value

    def repl(m: re.Match[str]) -> str:
        if m.group(1):
            return "$"
        name = m.group("braced") or m.group("plain")
        current = variables.get(name)
        op, word = m.group("op"), m.group("word") or ""
        if op in (":-", "-"):
            return current if (current if op == ":-" else current is not None) else word
        if op in (":+", "+"):
            return word if (current if op == ":+" else current is not None) else ""
        if op in (":?", "?") and not current:
            raise _fail(f"variable {name} is required: {word}")
        return current or ""

    return _VAR.sub(repl, value)


def _env_file(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    if not path.is_file():
        return out
    for line in path.read_text(errors="replace").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.removeprefix("export ").partition("=")
        out[key.strip()] = value.strip().strip("'\"")
    return out


def _seconds(value: Any, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, int | float):
        return float(value)
    total = 0.0
    for number, unit in _DURATION.findall(str(value)):
        total += float(number) * {"h": 3600, "m": 60, "s": 1, "ms": 0.001, "us": 1e-6}[unit]
    return total or default


def _mb(value: Any) -> int | None:
    if value is None:
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)b?\s*", str(value).lower())
    if not m:
        raise _fail(f"cannot read the memory size {value!r}")
    scale = {"": 1 / (1 << 20), "k": 1 / 1024, "m": 1, "g": 1024, "t": 1 << 20}[m.group(2)]
    return max(1, int(float(m.group(1)) * scale))


def _env_map(value: Any) -> dict[str, str]:
    if isinstance(value, dict):
        return {str(k): "" if v is None else str(v) for k, v in value.items()}
    out: dict[str, str] = {}
    for item in value or []:
        key, eq, val = str(item).partition("=")
        if eq:
            out[key] = val
    return out


def _argv(value: Any) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return shlex.split(value)
    return [str(v) for v in value]


@dataclass(frozen=True)
class Healthcheck:
    test: list[str]
    interval_sec: float = 5.0
    timeout_sec: float = 30.0
    retries: int = 3
    start_period_sec: float = 0.0


@dataclass
class Service:
    name: str
    image: str | None = None
    #: Build context (inside environment/), Dockerfile relative to it, args, target.
    context: Path | None = None
    dockerfile: str = "Dockerfile"
    build_args: dict[str, str] = field(default_factory=dict)
    target: str | None = None
    command: list[str] | None = None
    entrypoint: list[str] | None = None
    environment: dict[str, str] = field(default_factory=dict)
    working_dir: str | None = None
    user: str | None = None
    #: Services this one waits for, and how: started, healthy, completed_successfully.
    depends_on: dict[str, str] = field(default_factory=dict)
    healthcheck: Healthcheck | None = None
    #: (host folder inside environment/ or a volume name, path inside, read-only?)
    binds: list[tuple[str, str, bool]] = field(default_factory=list)
    tmpfs: list[str] = field(default_factory=list)
    cpus: float | None = None
    memory_mb: int | None = None


@dataclass
class ComposePlan:
    main: Service
    others: list[Service]
    #: Named volumes the services use (created per trial).
    volumes: list[str] = field(default_factory=list)

    def start_order(self) -> list[Service]:
        """The side services, each after what it depends on. Raises on a cycle."""
        by_name = {s.name: s for s in self.others}
        order: list[Service] = []
        state: dict[str, str] = {}

        def visit(name: str, trail: tuple[str, ...]) -> None:
            if state.get(name) == "done" or name == self.main.name:
                return
            if state.get(name) == "visiting":
                raise _fail(f"depends_on has a cycle: {' -> '.join((*trail, name))}")
            if name not in by_name:
                raise _fail(f"depends_on names an unknown service {name!r}")
            state[name] = "visiting"
            for dep in by_name[name].depends_on:
                visit(dep, (*trail, name))
            state[name] = "done"
            order.append(by_name[name])

        for s in self.others:
            visit(s.name, ())
        return order


def _service(name: str, raw: Any, env_dir: Path) -> Service:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise _fail(f"service {name!r} must be a mapping")
    svc = Service(name=name, image=str(raw["image"]) if raw.get("image") else None)
    build = raw.get("build")
    if build is not None:
        if isinstance(build, str):
            build = {"context": build}
        context = (env_dir / str(build.get("context", "."))).resolve()
        if not context.is_relative_to(env_dir.resolve()):
            raise _fail(f"service {name!r}: the build context {build.get('context')!r} is "
                        "outside environment/")
        svc.context = context
        svc.dockerfile = str(build.get("dockerfile", "Dockerfile"))
        svc.build_args = _env_map(build.get("args"))
        svc.target = build.get("target")
    svc.command = _argv(raw.get("command"))
    svc.entrypoint = _argv(raw.get("entrypoint"))
    svc.environment = _env_map(raw.get("environment"))
    for env_file in ([raw["env_file"]] if isinstance(raw.get("env_file"), str)
                     else raw.get("env_file") or []):
        path = env_file.get("path") if isinstance(env_file, dict) else env_file
        svc.environment = {**_env_file(env_dir / str(path)), **svc.environment}
    svc.working_dir = raw.get("working_dir")
    svc.user = str(raw["user"]) if raw.get("user") is not None else None
    deps = raw.get("depends_on") or {}
    if isinstance(deps, list):
        svc.depends_on = {str(d): "service_started" for d in deps}
    else:
        svc.depends_on = {str(d): str((c or {}).get("condition", "service_started"))
                          for d, c in deps.items()}
    hc = raw.get("healthcheck")
    if isinstance(hc, dict) and not hc.get("disable"):
        test = hc.get("test")
        if isinstance(test, str):
            test = ["CMD-SHELL", test]
        if test and test[0] != "NONE":
            argv = ["sh", "-c", " ".join(test[1:])] if test[0] == "CMD-SHELL" else (
                list(test[1:]) if test[0] == "CMD" else list(test))
            svc.healthcheck = Healthcheck(
                argv, _seconds(hc.get("interval"), 5.0), _seconds(hc.get("timeout"), 30.0),
                int(hc.get("retries", 3)), _seconds(hc.get("start_period"), 0.0))
    for volume in raw.get("volumes") or []:
        if isinstance(volume, dict):
            source, target = volume.get("source"), volume.get("target")
            read_only = bool(volume.get("read_only"))
        else:
            parts = str(volume).split(":")
            if len(parts) == 1:
                continue  # an anonymous volume: the container's own layer does as well
            source, target = parts[0], parts[1]
            read_only = len(parts) > 2 and "ro" in parts[2].split(",")
        if not source or not target:
            continue
        if source.startswith((".", "/", "~")):
            host = (env_dir / source).resolve()
            if not host.is_relative_to(env_dir.resolve()):
                raise _fail(f"service {name!r} mounts {source}: only folders inside "
                            "environment/ can be mounted (read-only)")
            svc.binds.append((str(host), str(target), True))
        else:
            svc.binds.append((str(source), str(target), read_only))
    tmpfs = raw.get("tmpfs") or []
    svc.tmpfs = [tmpfs] if isinstance(tmpfs, str) else [str(t) for t in tmpfs]
    limits = ((raw.get("deploy") or {}).get("resources") or {}).get("limits") or {}
    if limits.get("cpus") or raw.get("cpus"):
        svc.cpus = float(limits.get("cpus") or raw.get("cpus"))
    svc.memory_mb = _mb(limits.get("memory") or raw.get("mem_limit"))
    if raw.get("privileged"):
        raise _fail(f"service {name!r} asks for privileged mode, which sandlot never grants")
    return svc


def load_compose(path: Path, variables: dict[str, str]) -> ComposePlan:
    """Parse and check a compose file. Raises: TrialError BUILD_FAILED naming the problem."""
    import yaml

    env_dir = path.parent
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise _fail(f"cannot be read: {exc}") from exc
    if not isinstance(raw, dict) or not isinstance(raw.get("services"), dict):
        raise _fail("has no `services:` mapping")
    raw = interpolate(raw, {**_env_file(env_dir / ".env"), **variables})
    services = raw["services"]
    main_name = next((n for n in MAIN_SERVICES if n in services), None)
    if main_name is None:
        raise _fail(f"no main service: name the service sandlot runs the agent in `main` "
                    f"(services: {', '.join(map(str, services))})")
    main = _service(main_name, services[main_name], env_dir)
    if main.image == MAIN_IMAGE:
        main.image = None
    if main.context is None and main.image is None and (env_dir / "Dockerfile").is_file():
        main.context = env_dir.resolve()
    if main.context is None and main.image is None:
        raise _fail(f"service {main_name!r} has neither build nor image, and environment/ "
                    "has no Dockerfile")
    others = [_service(str(n), s, env_dir) for n, s in services.items() if n != main_name]
    for svc in others:
        if svc.context is None and svc.image is None:
            raise _fail(f"service {svc.name!r} has neither build nor image")
    volumes = sorted({src for s in (main, *others) for src, _, _ in s.binds
                      if not src.startswith("/")})
    plan = ComposePlan(main=main, others=others, volumes=volumes)
    plan.start_order()
    return plan
