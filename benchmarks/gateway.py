"""Latency the LLM gateway adds over calling the provider directly, against a LiteLLM proxy.

One run starts three servers, each in its own process so no two share an event loop with
each other or with the client:

- the upstream: a scripted model (`hello`) served as a stand-alone OpenAI-style provider
  (`sandlot.gateway.scripted_server.ScriptedServer`);
- the sandlot gateway, routing `openai/hello` to that upstream with `api_base`
  (pass-through: same wire format, relayed by the gateway's own HTTP client, no LiteLLM);
- a LiteLLM proxy (`litellm --config`), routing model `hello` to the same upstream as an
  OpenAI-compatible `api_base`. `litellm[proxy]` lives in a venv of its own outside the
  repo (created on first use); if it cannot be installed or started, its columns say why.

The client (`httpx.AsyncClient`, keep-alive) sends N sequential Chat Completions requests
per path, streamed and not, after a warm-up, in blocks of 25 with the paths taking turns, so
drift on the machine lands on all of them alike, and a pause before each block, so the
LiteLLM proxy's work after answering (logging, spend tracking) does not land on the
requests of the other paths. The added latency of a path is its p50 (p99) minus the
direct path's p50 (p99). Then C concurrent streaming clients (aiohttp) run for T seconds
against each path: requests/s. Each server's CPU time per request comes from /proc.

The requests/s phase runs twice. First against the upstream as above, which answers at
once: every process then competes for the same CPUs, and the figure is a CPU ceiling
(with the client and the upstream already keeping 2 CPUs busy when called directly, no
proxy can reach 0.8 of direct there; see docs/performance.md). Then against a second
upstream and gateway paced_children whose upstream paces its streams like a model (`--pace-ms`,
the first chunk after 200 ms, then one every 20 ms): C agents streaming at once, which
is what the gateway carries in a job.

It also measures what running the gateway inside the sandlot process costs (import, start,
first request; time and RSS, in a fresh interpreter that has already imported `sandlot.cli`),
against what a child process costs (spawn until ready, and its RSS).

    .venv/bin/python benchmarks/gateway.py [--n 300] [--concurrency 64] [--duration 10]
                                           [--pace-ms 200 20] [--skip-proxy]
                                           [--proxy-venv DIR] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import math
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

REPO = Path(__file__).resolve().parents[1]
MODEL = "hello"
EXPECTED_TEXT = "Hello from the scripted model."
PROXY_KEY = "sk-bench-proxy"
UPSTREAM_KEY = "sk-bench-upstream"
DEFAULT_PROXY_VENV = Path(tempfile.gettempdir()) / "sandlot-bench-venv"
CLK_TCK = os.sysconf("SC_CLK_TCK")
#: Sequential requests go in blocks of this many per path and mode, paths taking turns...
BLOCK = 25
#: ...with this pause before each block, so one path's background work stays out of the next.
SETTLE_SEC = 0.1
#: Goal from the issue: the gateway adds under this at p50...
GOAL_ADDED_P50_SEC = 0.002
#: ...and under this fraction of what the LiteLLM proxy adds.
GOAL_FRACTION_OF_PROXY = 0.2
#: Goal from issue 31: at C concurrent model-paced streams, at least this share of the
#: requests/s of calling the upstream directly.
GOAL_PACED_SHARE_OF_DIRECT = 0.8


# -- servers, each run in a child process (`--serve ROLE`) -------------------------------


def _ready(info: dict[str, Any]) -> None:
    """Tell the parent the server is up (one JSON line on stdout)."""
    print(json.dumps(info), flush=True)


async def _until_stdin_closes() -> None:
    """The parent stops a server by closing its stdin."""
    await asyncio.to_thread(sys.stdin.read)


async def _serve_upstream(pace_ms: tuple[float, float] | None = None) -> None:
    from sandlot.gateway.scripted import find_model
    from sandlot.gateway.scripted_server import ScriptedServer, StreamPace

    pace = StreamPace(pace_ms[0] / 1000, pace_ms[1] / 1000) if pace_ms else None
    server = ScriptedServer(find_model(MODEL, []), pace=pace)
    await server.start()
    _ready({"base_url": server.base_url})
    try:
        await _until_stdin_closes()
    finally:
        await server.stop()


async def _serve_gateway(upstream_url: str, n_keys: int, work_dir: str) -> None:
    from sandlot.gateway.routing import RouteConfig, Router
    from sandlot.gateway.server import Gateway

    os.environ["SANDLOT_BENCH_UPSTREAM_KEY"] = UPSTREAM_KEY
    gateway = Gateway(Router(RouteConfig(model=f"openai/{MODEL}", api_base=upstream_url,
                                         api_key_env="SANDLOT_BENCH_UPSTREAM_KEY")))
    await gateway.start()
    keys = []
    for i in range(n_keys):
        session = await gateway.open_trial(f"bench-{i}", None, Path(work_dir) / f"trial-{i}")
        keys.append(session.key)
    _ready({"base_url": gateway.host_base_url + "/v1", "keys": keys})
    try:
        await _until_stdin_closes()
    finally:
        await gateway.stop()


def _rss_mb(pid: int | str = "self") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _measure_in_process(upstream_url: str, work_dir: str) -> None:
    """In a fresh interpreter: the cost of the gateway inside a sandlot CLI process."""
    steps: list[dict[str, Any]] = []
    mark = {"t": time.perf_counter(), "rss": _rss_mb()}

    def step(name: str) -> None:
        now, rss = time.perf_counter(), _rss_mb()
        steps.append({"step": name, "sec": now - mark["t"], "rss_added_mb": rss - mark["rss"],
                      "rss_mb": rss})
        mark.update(t=time.perf_counter(), rss=_rss_mb())

    import sandlot.cli  # noqa: F401  (what the CLI process holds before any gateway)

    step("import sandlot.cli (baseline, not gateway cost)")
    from sandlot.gateway.routing import RouteConfig, Router
    from sandlot.gateway.server import Gateway

    step("import sandlot.gateway.server + routing")

    async def run() -> None:
        import httpx

        gateway = Gateway(Router(RouteConfig(model=f"openai/{MODEL}", api_base=upstream_url)))
        await gateway.start()
        session = await gateway.open_trial("startup", None, Path(work_dir) / "startup")
        step("Gateway(...).start() + open_trial")
        headers = {"authorization": f"Bearer {session.key}"}
        url = gateway.host_base_url + "/v1/chat/completions"
        async with httpx.AsyncClient(timeout=30) as client:
            body = _request_body(stream=False)
            reply = await client.post(url, content=body, headers=_json_headers(headers))
            reply.raise_for_status()
            step("first request (upstream client, SSL context, price map)")
            for i in range(200):
                reply = await client.post(url, content=_request_body(stream=bool(i % 2)),
                                          headers=_json_headers(headers))
                reply.raise_for_status()
            step("200 more requests, half streamed")
        await gateway.stop()

    asyncio.run(run())
    litellm_on_path = "litellm" in sys.modules
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm  # noqa: F401

    step("import litellm (a LiteLLM route's first request only)")
    _ready({"steps": steps, "litellm_imported_by_gateway": litellm_on_path})


def serve(role: str, args: list[str]) -> None:
    if role == "upstream":
        asyncio.run(_serve_upstream((float(args[0]), float(args[1])) if args else None))
    elif role == "gateway":
        asyncio.run(_serve_gateway(args[0], int(args[1]), args[2]))
    elif role == "in-process":
        _measure_in_process(args[0], args[1])
    else:
        raise SystemExit(f"unknown role {role!r}")


# -- child processes ---------------------------------------------------------------------


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[str]
    info: dict[str, Any] = field(default_factory=dict)
    ready_sec: float = 0.0
    ready_rss_mb: float = 0.0

    def cpu_sec(self) -> float:
        """User + system CPU seconds of the process so far."""
        stat = Path(f"/proc/{self.proc.pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2:].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def stop(self) -> None:
        """Close stdin (our own servers exit on that), else SIGTERM; SIGKILL as a last resort."""
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        else:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _read_line(proc: subprocess.Popen[str], timeout_sec: float) -> str | None:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout_sec)
    return proc.stdout.readline() if ready else None


def spawn_server(name: str, role: str, *args: str, timeout_sec: float = 60.0) -> Child:
    """Run this script as `--serve ROLE` and wait for its ready line."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, __file__, "--serve", role, *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            cwd=REPO)
    child = Child(name, proc)
    line = _read_line(proc, timeout_sec)
    if not line:
        child.stop()
        raise SystemExit(f"{name} did not start within {timeout_sec:.0f} s "
                         f"(exit code {proc.poll()})")
    child.ready_sec = time.perf_counter() - started
    child.ready_rss_mb = _rss_mb(proc.pid)
    child.info = json.loads(line)
    return child


def _system_busy_sec() -> float:
    """CPU seconds the whole machine has spent busy since boot (all CPUs, from /proc/stat)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / CLK_TCK


def cpu_snapshot(children: list[Child]) -> dict[str, float]:
    """Wall clock, machine-wide busy CPU, this client's CPU and each server's CPU (seconds)."""
    snap = {"wall": time.perf_counter(), "machine": _system_busy_sec(),
            "client": time.process_time()}
    snap.update({c.name: c.cpu_sec() for c in children})
    return snap


def cpu_since(before: dict[str, float], children: list[Child]) -> dict[str, float]:
    """CPU seconds spent since `before`, plus `other_cpus`: what the rest of the machine
    used meanwhile (busy CPUs on average). Near 0 means the figures are not disturbed."""
    after = cpu_snapshot(children)
    spent = {k: after[k] - before[k] for k in before}
    ours = sum(v for k, v in spent.items() if k not in ("wall", "machine"))
    spent["other_cpus"] = max(0.0, spent["machine"] - ours) / spent["wall"]
    return spent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- the LiteLLM proxy -------------------------------------------------------------------


def ensure_proxy_venv(venv: Path, log: TextIO) -> tuple[Path | None, str]:
    """The `litellm` entry point of a venv holding `litellm[proxy]`, installing on first use."""
    exe = venv / "bin" / "litellm"
    if exe.is_file():
        return exe, ""
    print(f"installing litellm[proxy] into {venv} (once; a minute or two)...", file=log)
    install_log = venv.parent / f"{venv.name}-install.log"
    try:
        with install_log.open("w") as out:
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True,
                           stdout=out, stderr=subprocess.STDOUT, timeout=300)
            subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "litellm[proxy]"],
                           check=True, stdout=out, stderr=subprocess.STDOUT, timeout=1200)
    except (OSError, subprocess.SubprocessError) as exc:
        tail = _tail(install_log)
        return None, f"installing litellm[proxy] into {venv} failed ({exc}): {tail}"
    if not exe.is_file():
        return None, f"{exe} missing after pip install (see {install_log})"
    return exe, ""


def _tail(path: Path, n_chars: int = 400) -> str:
    with contextlib.suppress(OSError):
        return path.read_text(errors="replace")[-n_chars:].strip()
    return ""


def start_proxy(exe: Path, upstream_url: str, work_dir: Path,
                timeout_sec: float = 180.0) -> tuple[Child | None, str]:
    """`litellm --config` routing model `hello` to the upstream; access log off, like ours."""
    import httpx

    config = work_dir / "litellm.yaml"
    config.write_text(
        "model_list:\n"
        f"  - model_name: {MODEL}\n"
        "    litellm_params:\n"
        f"      model: openai/{MODEL}\n"
        f"      api_base: {upstream_url}\n"
        f"      api_key: {UPSTREAM_KEY}\n"
        "general_settings:\n"
        f"  master_key: {PROXY_KEY}\n")
    log_config = work_dir / "litellm-log.json"
    log_config.write_text(json.dumps({
        "version": 1, "disable_existing_loggers": False,
        "loggers": {"uvicorn.access": {"level": "WARNING"}}}))
    port = free_port()
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}
    proxy_log = work_dir / "litellm-proxy.log"
    started = time.perf_counter()
    with proxy_log.open("w") as out:
        proc = subprocess.Popen(
            [str(exe), "--config", str(config), "--host", "127.0.0.1", "--port", str(port),
             "--log_config", str(log_config)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, text=True, env=env,
            cwd=work_dir)
    child = Child("litellm proxy", proc, {"base_url": f"http://127.0.0.1:{port}/v1"})
    deadline = started + timeout_sec
    while time.perf_counter() < deadline:
        if proc.poll() is not None:
            return None, f"the proxy exited with code {proc.returncode}: {_tail(proxy_log)}"
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/health/liveliness", timeout=2).is_success:
                child.ready_sec = time.perf_counter() - started
                child.ready_rss_mb = _rss_mb(proc.pid)
                return child, ""
        time.sleep(0.25)
    child.stop()
    return None, f"the proxy was not ready within {timeout_sec:.0f} s: {_tail(proxy_log)}"


# -- the client --------------------------------------------------------------------------


def _request_body(stream: bool) -> bytes:
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "system", "content": "You are a terse assistant."},
                     {"role": "user", "content": "Say hello."}],
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return json.dumps(body).encode()


def _json_headers(headers: dict[str, str]) -> dict[str, str]:
    return {**headers, "content-type": "application/json"}


@dataclass
class Target:
    """One way to reach the model: directly, through the gateway, through the proxy."""

    name: str
    url: str
    keys: list[str]
    #: The processes this path goes through besides the upstream (for CPU per request).
    server: Child | None = None
    bodies: dict[bool, bytes] = field(
        default_factory=lambda: {s: _request_body(s) for s in (False, True)})

    def headers(self, i: int = 0) -> dict[str, str]:
        return _json_headers({"authorization": f"Bearer {self.keys[i % len(self.keys)]}"})


class BadReply(Exception):
    pass


async def call(client: Any, target: Target, stream: bool, key_index: int = 0,
               check: bool = False) -> float:
    """Seconds from sending the request to the last byte of the answer."""
    headers, body = target.headers(key_index), target.bodies[stream]
    started = time.perf_counter()
    if stream:
        tail = b""
        chunks: list[bytes] = []
        async with client.stream("POST", target.url, content=body, headers=headers) as reply:
            async for chunk in reply.aiter_raw():
                tail = (tail + chunk)[-64:]
                if check:
                    chunks.append(chunk)
        elapsed = time.perf_counter() - started
        if reply.status_code != 200 or b"[DONE]" not in tail:
            raise BadReply(f"{target.name} stream: HTTP {reply.status_code}, ends {tail!r}")
        if check:
            _check_stream(target, b"".join(chunks))
        return elapsed
    reply = await client.post(target.url, content=body, headers=headers)
    elapsed = time.perf_counter() - started
    if reply.status_code != 200:
        raise BadReply(f"{target.name}: HTTP {reply.status_code}: {reply.text[:300]}")
    if check and reply.json()["choices"][0]["message"]["content"] != EXPECTED_TEXT:
        raise BadReply(f"{target.name}: unexpected answer {reply.text[:300]}")
    return elapsed


def _check_stream(target: Target, raw: bytes) -> None:
    text = ""
    for line in raw.decode().splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            for choice in json.loads(line[6:]).get("choices", []):
                text += choice.get("delta", {}).get("content") or ""
    if text != EXPECTED_TEXT:
        raise BadReply(f"{target.name} stream: unexpected answer {text!r}")


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


@dataclass
class Latency:
    """Seconds, per request, sequential."""

    n: int
    p50: float
    p99: float
    mean: float
    min: float

    @classmethod
    def of(cls, values: list[float]) -> Latency:
        return cls(n=len(values), p50=percentile(values, 50), p99=percentile(values, 99),
                   mean=sum(values) / len(values), min=min(values))


async def measure_latency(targets: list[Target], children: list[Child], n: int, warmup: int,
                          ) -> tuple[dict[str, dict[str, Latency]], dict[str, float]]:
    """N sequential requests per (path, streamed or not), in interleaved blocks; CPU ms per
    request of each process over the whole phase (background work included)."""
    import httpx

    samples: dict[tuple[str, bool], list[float]] = {(t.name, s): [] for t in targets
                                                    for s in (False, True)}
    async with httpx.AsyncClient(timeout=60) as client:
        for i in range(warmup):
            for target in targets:
                for stream in (False, True):
                    await call(client, target, stream, check=i == 0)
        gc.collect()
        before = cpu_snapshot(children)
        gc.disable()
        try:
            for block in range(math.ceil(n / BLOCK)):
                size = min(BLOCK, n - block * BLOCK)
                # Rotate the order so no path always runs right after another.
                turn = targets[block % len(targets):] + targets[:block % len(targets)]
                for stream in (False, True) if block % 2 else (True, False):
                    for target in turn:
                        # Let the previous block's after-work end first (the LiteLLM
                        # proxy spends ~10 ms CPU per request after answering it).
                        await asyncio.sleep(SETTLE_SEC)
                        for _ in range(size):
                            samples[target.name, stream].append(
                                await call(client, target, stream))
        finally:
            gc.enable()
        spent = cpu_since(before, children)
    # The upstream serves every path; each other server only its own.
    cpu_ms = {t.name: spent[t.server.name] * 1000 / (2 * n) for t in targets if t.server}
    cpu_ms["upstream"] = spent["upstream"] * 1000 / (2 * n * len(targets))
    cpu_ms["client"] = spent["client"] * 1000 / (2 * n * len(targets))
    cpu_ms["other_cpus"] = spent["other_cpus"]
    table = {t.name: {("streamed" if s else "not streamed"): Latency.of(samples[t.name, s])
                      for s in (False, True)} for t in targets}
    return table, cpu_ms


@dataclass
class Throughput:
    concurrency: int
    duration_sec: float
    requests: int
    requests_per_sec: float
    p50_sec: float | None
    p99_sec: float | None
    errors: int
    first_error: str | None
    #: CPU ms per request of the path's own server (gateway or proxy) and of the upstream.
    server_cpu_ms_per_request: float | None
    upstream_cpu_ms_per_request: float | None
    #: CPU time of the client process ÷ wall time: near 1.0 means the client is the limit.
    client_cpu_busy: float
    #: CPUs kept busy by the rest of the machine meanwhile (0 on a quiet machine).
    other_cpus: float


async def stream_once(session: Any, target: Target, key_index: int) -> float:
    """One streamed request with aiohttp; seconds to the last byte."""
    started = time.perf_counter()
    tail = b""
    async with session.post(target.url, data=target.bodies[True],
                            headers=target.headers(key_index)) as reply:
        async for chunk in reply.content.iter_any():
            tail = (tail + chunk)[-64:]
    if reply.status != 200 or b"[DONE]" not in tail:
        raise BadReply(f"{target.name} stream: HTTP {reply.status}, ends {tail!r}")
    return time.perf_counter() - started


async def measure_throughput(target: Target, children: list[Child], concurrency: int,
                             duration_sec: float, warmup_sec: float = 1.0) -> Throughput:
    """`concurrency` clients streaming back to back; counts what ends inside the window.

    The load comes from aiohttp, not httpx: at 64 concurrent streams httpx's connection
    pool spends several ms of CPU per request, so the client, not the server, set the
    pace (about 95 req/s straight at the upstream on 2 CPUs, against about 1,100 with
    aiohttp).
    """
    import aiohttp

    latencies: list[float] = []
    errors: list[str] = []
    start = time.perf_counter()
    window_start, window_end = start + warmup_sec, start + warmup_sec + duration_sec
    spent: dict[str, float] = {}

    async def client_loop(session: aiohttp.ClientSession, index: int) -> None:
        while time.perf_counter() < window_end:
            try:
                elapsed = await stream_once(session, target, index)
            except (BadReply, aiohttp.ClientError) as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(0.01)
                continue
            if window_start <= time.perf_counter() <= window_end:
                latencies.append(elapsed)

    async def take_marks() -> None:
        await asyncio.sleep(max(0.0, window_start - time.perf_counter()))
        before = cpu_snapshot(children)
        await asyncio.sleep(max(0.0, window_end - time.perf_counter()))
        spent.update(cpu_since(before, children))

    connector = aiohttp.TCPConnector(limit=concurrency * 2)
    timeout = aiohttp.ClientTimeout(total=60)
    async with (aiohttp.ClientSession(connector=connector, timeout=timeout) as session,
                asyncio.TaskGroup() as tg):
        tg.create_task(take_marks())
        for i in range(concurrency):
            tg.create_task(client_loop(session, i))
    done = len(latencies)
    return Throughput(
        concurrency=concurrency, duration_sec=duration_sec, requests=done,
        requests_per_sec=done / duration_sec,
        p50_sec=percentile(latencies, 50) if latencies else None,
        p99_sec=percentile(latencies, 99) if latencies else None,
        errors=len(errors), first_error=errors[0] if errors else None,
        server_cpu_ms_per_request=(spent[target.server.name] * 1000 / done
                                   if done and target.server else None),
        upstream_cpu_ms_per_request=spent["upstream"] * 1000 / done if done else None,
        client_cpu_busy=spent["client"] / spent["wall"], other_cpus=spent["other_cpus"])


def run_paced(args: argparse.Namespace, work_dir: Path,
              proxy_exe: Path | None) -> dict[str, Throughput]:
    """requests/s direct, through a gateway and through a LiteLLM proxy (with `proxy_exe`),
    against an upstream paced like a model."""
    first_ms, every_ms = args.pace_ms
    upstream = spawn_server("upstream", "upstream", str(first_ms), str(every_ms))
    # The CPU marks name the processes: the paced ones replace the first ones meanwhile.
    paced_children = [upstream]
    out: dict[str, Throughput] = {}
    try:
        gateway = spawn_server("gateway", "gateway", upstream.info["base_url"],
                               str(args.concurrency), str(work_dir / "paced-trajectories"))
        paced_children.append(gateway)
        targets = [Target("direct", upstream.info["base_url"] + "/chat/completions",
                          [UPSTREAM_KEY]),
                   Target("gateway", gateway.info["base_url"] + "/chat/completions",
                          gateway.info["keys"], gateway)]
        if proxy_exe is not None:
            proxy_dir = work_dir / "paced-proxy"
            proxy_dir.mkdir()
            proxy, why = start_proxy(proxy_exe, upstream.info["base_url"], proxy_dir)
            if proxy is None:
                print(f"LiteLLM proxy (paced run) unavailable: {why}", file=sys.stderr)
            else:
                paced_children.append(proxy)
                targets.append(Target("litellm proxy", proxy.info["base_url"]
                                      + "/chat/completions", [PROXY_KEY], proxy))
        for target in targets:
            print(f"requests/s, paced upstream ({first_ms:g} ms, then {every_ms:g} ms per "
                  f"chunk): {args.concurrency} streams for {args.duration:g} s against "
                  f"{target.name}...", file=sys.stderr)
            out[target.name] = asyncio.run(measure_throughput(
                target, paced_children, args.concurrency, args.duration))
    finally:
        for child in reversed(paced_children):
            child.stop()
    return out


# -- start-up cost -----------------------------------------------------------------------


def measure_startup(upstream_url: str, work_dir: Path, gateway: Child) -> dict[str, Any]:
    """In-process cost (a fresh interpreter) next to what the gateway child cost to start."""
    child = spawn_server("in-process measurement", "in-process", upstream_url,
                         str(work_dir / "startup"), timeout_sec=120)
    child.stop()
    bare_started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return {
        "in_process": child.info["steps"],
        "litellm_imported_by_gateway": child.info["litellm_imported_by_gateway"],
        "child": {"ready_sec": gateway.ready_sec, "rss_mb": gateway.ready_rss_mb,
                  "bare_python_start_sec": time.perf_counter() - bare_started},
    }


# -- report ------------------------------------------------------------------------------


def ms(seconds: float | None, digits: int = 2) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.{digits}f}"


def added(table: dict[str, dict[str, Latency]], name: str, mode: str) -> dict[str, float]:
    via, direct = table[name][mode], table["direct"][mode]
    return {"p50": via.p50 - direct.p50, "p99": via.p99 - direct.p99}


def summarise(table: dict[str, dict[str, Latency]]) -> dict[str, Any]:
    """Added latency per path and mode, the gateway ÷ proxy ratios, and the goal verdicts."""
    out: dict[str, Any] = {}
    for mode in ("not streamed", "streamed"):
        row: dict[str, Any] = {name: added(table, name, mode) for name in table
                               if name != "direct"}
        gw = row["gateway"]
        proxy = row.get("litellm proxy")
        ratio = (gw["p50"] / proxy["p50"]) if proxy and proxy["p50"] > 0 else None
        row["gateway_over_proxy_p50"] = ratio
        row["goal_gateway_p50_under_2ms"] = gw["p50"] < GOAL_ADDED_P50_SEC
        row["goal_under_a_fifth_of_proxy"] = (None if ratio is None
                                              else ratio < GOAL_FRACTION_OF_PROXY)
        out[mode] = row
    return out


def print_report(report: dict[str, Any], out: TextIO) -> None:
    def p(line: str = "") -> None:
        print(line, file=out)

    def row(label: str, cells: list[str], width: int = 34) -> None:
        p(f"{label:<{width}}" + "".join(f"{c:>16}" for c in cells))

    meta = report["meta"]
    p(f"sandlot gateway latency: model `{MODEL}` (scripted upstream), Chat Completions, "
      f"{meta['cpus']} CPUs, Python {meta['python']}, load average "
      f"{meta['loadavg_1min_at_start']:.2f} at start")
    if report["proxy_unavailable"]:
        p(f"LiteLLM proxy: unavailable, {report['proxy_unavailable']}")
    else:
        p(f"LiteLLM proxy: litellm {meta['litellm_proxy_version']} in {meta['proxy_venv']}")
    table: dict[str, dict[str, Latency]] = report["latency"]
    names = list(table)
    p()
    p(f"sequential requests, {meta['n']} per path and mode after {meta['warmup']} warm-up "
      f"rounds, in blocks of {BLOCK} taking turns (ms, to the last byte)")
    row("", names)
    for mode in ("not streamed", "streamed"):
        for stat in ("p50", "p99"):
            row(f"  {mode} {stat}", [ms(getattr(table[n][mode], stat)) for n in names])
    p()
    p("added over direct (ms): via p50 - direct p50, via p99 - direct p99")
    summary = report["added"]
    vias = [n for n in names if n != "direct"]
    row("", vias)
    for mode in ("not streamed", "streamed"):
        for stat in ("p50", "p99"):
            row(f"  {mode} {stat}", [ms(summary[mode][n][stat]) for n in vias])
    for mode in ("not streamed", "streamed"):
        ratio = summary[mode]["gateway_over_proxy_p50"]
        row(f"  gateway ÷ proxy, {mode} p50", [f"{ratio:.3f}" if ratio is not None else "-"])
    p()
    cpu = dict(report["latency_cpu_ms_per_request"])
    other = cpu.pop("other_cpus")
    p(f"CPU per request in the sequential phase (ms); the rest of the machine kept "
      f"{other:.2f} CPUs busy meanwhile")
    row("", list(cpu))
    row("  process", [f"{v:.2f}" for v in cpu.values()])
    p()
    thr: dict[str, Throughput] = report["throughput"]
    if thr:
        first = next(iter(thr.values()))
        p(f"{first.concurrency} concurrent streaming clients, {first.duration_sec:g} s window "
          "(after 1 s of warm-up), upstream answering at once: a CPU ceiling")
        print_throughput(thr, row, p)
    paced: dict[str, Throughput] = report["paced_throughput"]
    if paced:
        first = next(iter(paced.values()))
        first_ms, every_ms = report["pace_ms"]
        p(f"{first.concurrency} concurrent streaming clients, {first.duration_sec:g} s window, "
          f"upstream paced like a model (first chunk after {first_ms:g} ms, then one every "
          f"{every_ms:g} ms)")
        print_throughput(paced, row, p)
    startup = report["startup"]
    p("the gateway in the sandlot process (fresh interpreter, `sandlot.cli` imported first)")
    row("", ["ms", "RSS added MB", "RSS MB"], width=62)
    for s in startup["in_process"]:
        row(f"  {s['step']}", [f"{s['sec'] * 1000:.1f}", f"{s['rss_added_mb']:.1f}",
                               f"{s['rss_mb']:.1f}"], width=62)
    p(f"  litellm imported by the pass-through gateway: "
      f"{'yes' if startup['litellm_imported_by_gateway'] else 'no'}")
    child = startup["child"]
    p("the gateway as a child process")
    row("  spawn → ready (interpreter + imports + start)",
        [f"{child['ready_sec'] * 1000:.1f}", "", f"{child['rss_mb']:.1f}"], width=62)
    row("  bare `python -c pass`", [f"{child['bare_python_start_sec'] * 1000:.1f}"], width=62)
    proxy = report.get("proxy_start")
    if proxy:
        row("  LiteLLM proxy, spawn → /health/liveliness answers",
            [f"{proxy['ready_sec'] * 1000:.0f}", "", f"{proxy['rss_mb']:.1f}"], width=62)
    p()
    p("goals (issue 3)")
    for mode in ("not streamed", "streamed"):
        s = summary[mode]
        verdict_2ms = "yes" if s["goal_gateway_p50_under_2ms"] else "NO"
        fifth = s["goal_under_a_fifth_of_proxy"]
        verdict_fifth = "n/a (no proxy)" if fifth is None else ("yes" if fifth else "NO")
        p(f"  {mode}: gateway adds < 2 ms p50: {verdict_2ms}; "
          f"< 1/5 of the proxy's added p50: {verdict_fifth}")
    p("goals (issue 31)")
    share = share_of_direct(report["paced_throughput"])
    if share is None:
        p("  paced streams: not measured")
    else:
        verdict = "met" if share >= GOAL_PACED_SHARE_OF_DIRECT else "NOT met"
        p(f"  {report['meta']['concurrency']} paced streams: gateway ≥ "
          f"{GOAL_PACED_SHARE_OF_DIRECT:.1f}× direct requests/s: {verdict} ({share:.2f}×)")
    ceiling = share_of_direct(report["throughput"])
    if ceiling is not None:
        p(f"  upstream answering at once (CPU ceiling, no goal): {ceiling:.2f}× direct")
    for mode in ("not streamed", "streamed"):
        ratio = summary[mode]["gateway_over_proxy_p50"]
        if ratio is not None:
            verdict = "met" if ratio <= 1 / 20 else "NOT met"
            p(f"  {mode}: added p50 ≤ 1/20 of the LiteLLM proxy's: {verdict} ({ratio:.3f})")


def print_throughput(thr: dict[str, Throughput], row: Any, p: Any) -> None:
    row("", list(thr))
    row("  requests/s", [f"{t.requests_per_sec:.0f}" for t in thr.values()])
    base = thr.get("direct")
    if base and base.requests_per_sec:
        row("  ÷ direct", [f"{t.requests_per_sec / base.requests_per_sec:.2f}"
                           for t in thr.values()])
    row("  p50 latency (ms)", [ms(t.p50_sec, 1) for t in thr.values()])
    row("  p99 latency (ms)", [ms(t.p99_sec, 1) for t in thr.values()])
    row("  errors", [str(t.errors) for t in thr.values()])
    row("  CPU/request, its server (ms)",
        [f"{t.server_cpu_ms_per_request:.2f}" if t.server_cpu_ms_per_request else "-"
         for t in thr.values()])
    row("  CPU/request, upstream (ms)",
        [f"{t.upstream_cpu_ms_per_request:.2f}" if t.upstream_cpu_ms_per_request else "-"
         for t in thr.values()])
    row("  client CPU busy (of 1 CPU)", [f"{t.client_cpu_busy:.2f}" for t in thr.values()])
    row("  other processes (CPUs busy)", [f"{t.other_cpus:.2f}" for t in thr.values()])
    for name, t in thr.items():
        if t.first_error:
            p(f"  {name}: first error: {t.first_error[:300]}")
    p()


def share_of_direct(thr: dict[str, Throughput]) -> float | None:
    """The gateway's requests/s ÷ direct's, or None without both."""
    direct, via = thr.get("direct"), thr.get("gateway")
    if direct is None or via is None or not direct.requests_per_sec:
        return None
    return via.requests_per_sec / direct.requests_per_sec


# -- main --------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=300,
                        help="sequential requests per path and mode (streamed, not)")
    parser.add_argument("--warmup", type=int, default=20,
                        help="uncounted rounds over every path and mode first")
    parser.add_argument("--concurrency", type=int, default=64,
                        help="concurrent streaming clients in the requests/s phase")
    parser.add_argument("--duration", type=float, default=10.0,
                        help="seconds counted in the requests/s phase, per path (0 skips it)")
    parser.add_argument("--pace-ms", type=float, nargs=2, default=[200.0, 20.0],
                        metavar=("FIRST", "EVERY"),
                        help="the paced upstream: ms before a stream's first chunk and "
                             "between the next ones (0 0 skips the paced run)")
    parser.add_argument("--skip-proxy", action="store_true",
                        help="leave the LiteLLM proxy out (no venv, no install)")
    parser.add_argument("--proxy-venv", type=Path, default=DEFAULT_PROXY_VENV,
                        help="venv holding litellm[proxy], created if missing "
                             f"(default {DEFAULT_PROXY_VENV})")
    parser.add_argument("--json", action="store_true",
                        help="write the figures as JSON to stdout (the table goes to stderr)")
    parser.add_argument("--serve", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.n < 1 or args.concurrency < 1 or args.warmup < 1:
        parser.error("--n, --warmup and --concurrency must be >= 1")
    return args


def _proxy_version(exe: Path) -> str:
    python = exe.parent / "python"
    done = subprocess.run([str(python), "-c", "from importlib.metadata import version; "
                           "print(version('litellm'))"], capture_output=True, text=True)
    return done.stdout.strip() or "?"


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, Latency | Throughput):
        return asdict(value)
    return value


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve:
        serve(args.serve[0], args.serve[1:])
        return 0
    log = sys.stderr
    load_at_start = os.getloadavg()[0]
    work_dir = Path(tempfile.mkdtemp(prefix="sandlot-bench-gateway-"))
    children: list[Child] = []
    try:
        upstream = spawn_server("upstream", "upstream")
        children.append(upstream)
        upstream_url = upstream.info["base_url"]
        gateway = spawn_server("gateway", "gateway", upstream_url, str(args.concurrency),
                               str(work_dir / "trajectories"))
        children.append(gateway)
        targets = [Target("direct", upstream_url + "/chat/completions", [UPSTREAM_KEY]),
                   Target("gateway", gateway.info["base_url"] + "/chat/completions",
                          gateway.info["keys"], gateway)]
        proxy_unavailable, proxy_start, proxy_version = None, None, None
        proxy_exe: Path | None = None
        if args.skip_proxy:
            proxy_unavailable = "skipped (--skip-proxy)"
        else:
            exe, why = ensure_proxy_venv(args.proxy_venv, log)
            proxy = None
            if exe is not None:
                print("starting the LiteLLM proxy...", file=log)
                proxy, why = start_proxy(exe, upstream_url, work_dir)
            if proxy is None:
                proxy_unavailable = why
                print(f"LiteLLM proxy unavailable: {why}", file=log)
            else:
                assert exe is not None
                proxy_exe = exe
                children.append(proxy)
                proxy_version = _proxy_version(exe)
                proxy_start = {"ready_sec": proxy.ready_sec, "rss_mb": proxy.ready_rss_mb}
                targets.append(Target("litellm proxy", proxy.info["base_url"]
                                      + "/chat/completions", [PROXY_KEY], proxy))
        print(f"latency: {args.n} sequential requests per path and mode...", file=log)
        latency, latency_cpu = asyncio.run(
            measure_latency(targets, children, args.n, args.warmup))
        throughput: dict[str, Throughput] = {}
        if args.duration > 0:
            for target in targets:
                print(f"requests/s: {args.concurrency} streams for {args.duration:g} s "
                      f"against {target.name}...", file=log)
                throughput[target.name] = asyncio.run(measure_throughput(
                    target, children, args.concurrency, args.duration))
        paced: dict[str, Throughput] = {}
        if args.duration > 0 and any(args.pace_ms):
            paced = run_paced(args, work_dir, proxy_exe)
        print("start-up and RSS of the gateway in-process...", file=log)
        startup = measure_startup(upstream_url, work_dir, gateway)
        report: dict[str, Any] = {
            "meta": {"n": args.n, "warmup": args.warmup, "concurrency": args.concurrency,
                     "duration_sec": args.duration, "cpus": os.cpu_count(),
                     "python": sys.version.split()[0], "proxy_venv": str(args.proxy_venv),
                     "litellm_proxy_version": proxy_version,
                     "loadavg_1min_at_start": load_at_start},
            "proxy_unavailable": proxy_unavailable,
            "latency": latency,
            "added": summarise(latency),
            "latency_cpu_ms_per_request": latency_cpu,
            "throughput": throughput,
            "paced_throughput": paced,
            "pace_ms": args.pace_ms,
            "startup": startup,
            "proxy_start": proxy_start,
        }
        print_report(report, sys.stderr if args.json else sys.stdout)
        if args.json:
            json.dump(_jsonable(report), sys.stdout, indent=2)
            print()
    finally:
        for child in reversed(children):
            child.stop()
        shutil.rmtree(work_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
