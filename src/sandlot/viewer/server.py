"""`sandlot view`: a local web app over a folder of jobs.

An aiohttp server on 127.0.0.1 serves the static page (static/: plain HTML, JS and CSS,
no build step, nothing fetched from the internet) and a JSON API that reads the job
folders when asked. File work runs in threads, so a slow disk never blocks the server.

API (all GET, all JSON unless noted):

    /api/jobs                                   the jobs list
    /api/jobs/{job}                             config, summary, state, one row per trial
    /api/jobs/{job}/signature                   changes when a trial starts or finishes
    /api/jobs/{job}/trials/{trial}              result, instruction, logs, repairs, files
    /api/jobs/{job}/trials/{trial}/steps        ?offset=&limit=  the trajectory, paged
    /api/jobs/{job}/trials/{trial}/exchanges    ?offset=&limit=  model exchanges, paged
    /api/jobs/{job}/trials/{trial}/exchanges/{n}  one exchange: new input + response
    /api/jobs/{job}/trials/{trial}/raw          ?source=builtin|gateway&line=n (text)
    /api/jobs/{job}/trials/{trial}/file         ?path=&offset=&length= (offset<0: tail)
    /api/jobs/{job}/trials/{trial}/changes      file writes/edits from the tool calls
    /api/compare                                ?jobs=a,b[,c]&alpha=&seed=
"""

from __future__ import annotations

import asyncio
import json
import os
import webbrowser
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from sandlot.viewer import jobs as J
from sandlot.viewer.lines import LRU, IndexCache
from sandlot.viewer.trajectory import TrialTrajectory, file_changes

STATIC = Path(__file__).with_name("static")
TAIL_BYTES = 64 * 1024
MAX_FILE_CHUNK = 1024 * 1024
MAX_LISTED_FILES = 2000
ALLOWED_HOSTS = {"127.0.0.1", "localhost", "[::1]", "::1"}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _json(data: Any) -> web.Response:
    return web.Response(text=json.dumps(data, default=str), content_type="application/json",
                        headers={"Cache-Control": "no-store"})


def read_chunk(path: Path, offset: int, length: int) -> dict[str, Any]:
    """Bytes offset..offset+length of a file as text; a negative offset counts from the end."""
    size = path.stat().st_size
    length = max(0, min(length, MAX_FILE_CHUNK))
    start = max(0, size + offset) if offset < 0 else min(offset, size)
    with open(path, "rb") as fh:
        fh.seek(start)
        data = fh.read(length)
    return {"size": size, "offset": start, "length": len(data),
            "text": data.decode("utf-8", errors="replace"),
            "eof": start + len(data) >= size}


def _tail(path: Path, n: int = TAIL_BYTES) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    return read_chunk(path, -n, n)


def _files(base: Path, limit: int = MAX_LISTED_FILES) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath) / name
            try:
                size = p.stat().st_size
            except OSError:
                continue
            out.append({"path": str(p.relative_to(base)), "size": size})
            if len(out) >= limit:
                return out
    return out


class Viewer:
    """The API over one folder of jobs."""

    def __init__(self, jobs_dir: Path) -> None:
        self.root = jobs_dir.resolve()
        self.indexes = IndexCache()
        self._compare_cache = LRU(32)

    # ------------------------------------------------------------ helpers

    def job(self, name: str) -> Path:
        try:
            return J.job_dir(self.root, name)
        except J.JobNotFound:
            raise ApiError(404, f"no job {name!r} in {self.root}") from None

    def trial(self, job: Path, name: str) -> Path:
        if not name or "/" in name or name.startswith("."):
            raise ApiError(404, f"no trial {name!r}")
        path = job / name
        if not path.is_dir():
            raise ApiError(404, f"no trial {name!r} in job {job.name}")
        return path

    # ------------------------------------------------------------ endpoints

    def jobs(self) -> dict[str, Any]:
        return {"jobs_dir": str(self.root), "jobs": J.list_jobs(self.root)}

    def job_detail(self, name: str) -> dict[str, Any]:
        path = self.job(name)
        config = J.load_config(path)
        slots = J.trial_slots(path, config)
        summary = J.job_summary(path, config)
        return {
            "name": path.name,
            "path": str(path),
            "config": config.model_dump() if config else None,
            "summary": summary.model_dump() if summary else None,
            "state": J.job_state(summary, slots, path),
            "signature": J.job_signature(path),
            "trials": [J.trial_row(s) for s in slots],
        }

    def signature(self, name: str) -> dict[str, Any]:
        path = self.job(name)
        return {"signature": J.job_signature(path)}

    def trial_detail(self, job_name: str, trial_name: str) -> dict[str, Any]:
        job = self.job(job_name)
        trial = self.trial(job, trial_name)
        config = J.load_config(job)
        task, attempt = J.split_trial_name(trial_name)
        result = J.read_result(trial / "result.json")
        slot = J.TrialSlot(trial_name, task, attempt, result, True)
        instruction = None
        if config is not None:
            folder = config.task_paths.get(task) or (
                str(Path(config.tasks_dir) / task) if config.tasks_dir else None)
            ipath = Path(folder) / "instruction.md" if folder else None
            if ipath is not None and ipath.is_file():
                instruction = read_chunk(ipath, 0, 200_000)["text"]
        traj = TrialTrajectory(trial, self.indexes)
        repairs = []
        if result is not None:
            for a in result.attempts:
                n = a.get("attempt")  # the feedback run after generation n
                folder = trial / "repairs" / f"attempt-{n}" if isinstance(n, int) else None
                repairs.append({**a, "folder": str(folder.relative_to(trial))
                                if folder and folder.is_dir() else None})
        for extra in sorted((trial / "repairs").glob("attempt-*")) if (
                trial / "repairs").is_dir() else []:
            rel = str(extra.relative_to(trial))
            if not any(r.get("folder") == rel for r in repairs):
                repairs.append({"attempt": None, "folder": rel})
        verifier = trial / "verifier"
        files = _files(trial)
        steps = [{**step.model_dump(), "folder": f"steps/{step.name}",
                  "test_stdout": _tail(trial / "steps" / step.name / "verifier"
                                       / "test_stdout.txt", 16 * 1024)}
                 for step in (result.steps or [])] if result is not None else []
        return {
            "job": job.name, "trial": trial_name, "task": task, "attempt": attempt,
            "status": slot.status,
            "result": result.model_dump() if result else None,
            "instruction": instruction,
            "trial_log": _tail(trial / "trial.log"),
            "exception": _tail(trial / "exception.txt"),
            "build_log": _tail(trial / "setup" / "build.log", 16 * 1024),
            "verifier": {
                "stdout": _tail(verifier / "test_stdout.txt"),
                "stderr": _tail(verifier / "test_stderr.txt"),
                "logs": [f for f in files if f["path"].startswith("verifier/logs/")],
            },
            "repairs": repairs,
            "steps": steps,
            "multi_step": result.multi_step.model_dump() if result and result.multi_step
            else None,
            "trajectory": {"source": traj.source, "n_records": traj.n_records,
                           "n_exchanges": traj.n_exchanges},
            "files": files,
            "diffs": [f["path"] for f in files
                      if f["path"].endswith((".diff", ".patch"))],
        }

    def steps(self, job_name: str, trial_name: str, offset: int, limit: int) -> dict[str, Any]:
        trial = self.trial(self.job(job_name), trial_name)
        return TrialTrajectory(trial, self.indexes).steps(offset, limit)

    def exchanges(self, job_name: str, trial_name: str, offset: int,
                  limit: int) -> dict[str, Any]:
        trial = self.trial(self.job(job_name), trial_name)
        traj = TrialTrajectory(trial, self.indexes)
        limit = max(1, min(limit, 500))
        total = traj.n_exchanges
        items = traj.exchange_summaries(offset, offset + limit)
        stop = min(total, offset + limit)
        return {"total": total, "offset": offset, "exchanges": items,
                "next_offset": stop if stop < total else None}

    def exchange(self, job_name: str, trial_name: str, n: int) -> dict[str, Any]:
        trial = self.trial(self.job(job_name), trial_name)
        data = TrialTrajectory(trial, self.indexes).exchange(n)
        if data is None:
            raise ApiError(404, f"no exchange {n}")
        return data

    def raw(self, job_name: str, trial_name: str, source: str, line: int) -> bytes:
        trial = self.trial(self.job(job_name), trial_name)
        raw = TrialTrajectory(trial, self.indexes).raw_line(source, line)
        if raw is None:
            raise ApiError(404, f"no line {line} in the {source} log")
        return raw

    def file(self, job_name: str, trial_name: str, rel: str, offset: int,
             length: int) -> dict[str, Any]:
        trial = self.trial(self.job(job_name), trial_name)
        try:
            path = J.safe_child(trial, rel)
        except PermissionError as exc:
            raise ApiError(403, str(exc)) from None
        if not path.is_file():
            raise ApiError(404, f"no file {rel!r}")
        return {"path": rel, **read_chunk(path, offset, length)}

    def changes(self, job_name: str, trial_name: str) -> dict[str, Any]:
        trial = self.trial(self.job(job_name), trial_name)
        return file_changes(TrialTrajectory(trial, self.indexes))

    def compare(self, names: list[str], alpha: float, seed: int) -> dict[str, Any]:
        from sandlot.report.compare import compare_jobs

        if len(names) < 2:
            raise ApiError(400, "compare needs at least two jobs: ?jobs=a,b")
        paths = [self.job(n) for n in names]
        key = (tuple(names), alpha, seed, tuple(J.job_signature(p) for p in paths))
        hit = self._compare_cache.get(key)
        if hit is None:
            hit = compare_jobs(paths, alpha=alpha, seed=seed)
            self._compare_cache.put(key, hit)
        return hit


def _int(request: web.Request, name: str, default: int) -> int:
    try:
        return int(request.query.get(name, default))
    except ValueError:
        raise ApiError(400, f"{name} must be an integer") from None


def _float(request: web.Request, name: str, default: float) -> float:
    try:
        return float(request.query.get(name, default))
    except ValueError:
        raise ApiError(400, f"{name} must be a number") from None


def _m(request: web.Request, key: str) -> str:
    return request.match_info[key]


def make_app(jobs_dir: Path) -> web.Application:
    viewer = Viewer(jobs_dir)

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        host = request.host.rsplit(":", 1)[0] if not request.host.startswith("[") \
            else request.host.split("]")[0] + "]"
        if host not in ALLOWED_HOSTS:
            return web.Response(status=403, text="sandlot view answers on localhost only")
        try:
            return await handler(request)
        except ApiError as exc:
            return web.json_response({"error": str(exc)}, status=exc.status)

    def api(fn: Callable[[web.Request], Any]) -> Handler:
        async def handler(request: web.Request) -> web.StreamResponse:
            result = await asyncio.to_thread(fn, request)
            if isinstance(result, web.StreamResponse):
                return result
            return _json(result)
        return handler

    m = _m
    async def index(_: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    routes = [
        web.get("/", index),
        web.get("/api/jobs", api(lambda r: viewer.jobs())),
        web.get("/api/jobs/{job}", api(lambda r: viewer.job_detail(m(r, "job")))),
        web.get("/api/jobs/{job}/signature", api(lambda r: viewer.signature(m(r, "job")))),
        web.get("/api/jobs/{job}/trials/{trial}",
                api(lambda r: viewer.trial_detail(m(r, "job"), m(r, "trial")))),
        web.get("/api/jobs/{job}/trials/{trial}/steps", api(lambda r: viewer.steps(
            m(r, "job"), m(r, "trial"), _int(r, "offset", 0), _int(r, "limit", 100)))),
        web.get("/api/jobs/{job}/trials/{trial}/exchanges", api(lambda r: viewer.exchanges(
            m(r, "job"), m(r, "trial"), _int(r, "offset", 0), _int(r, "limit", 100)))),
        web.get("/api/jobs/{job}/trials/{trial}/exchanges/{n}", api(lambda r: viewer.exchange(
            m(r, "job"), m(r, "trial"), int(m(r, "n")) if m(r, "n").isdigit() else -1))),
        web.get("/api/jobs/{job}/trials/{trial}/raw", api(lambda r: web.Response(
            body=viewer.raw(m(r, "job"), m(r, "trial"), r.query.get("source", "gateway"),
                            _int(r, "line", 0)),
            content_type="application/json"))),
        web.get("/api/jobs/{job}/trials/{trial}/file", api(lambda r: viewer.file(
            m(r, "job"), m(r, "trial"), r.query.get("path", ""), _int(r, "offset", 0),
            _int(r, "length", TAIL_BYTES)))),
        web.get("/api/jobs/{job}/trials/{trial}/changes",
                api(lambda r: viewer.changes(m(r, "job"), m(r, "trial")))),
        web.get("/api/compare", api(lambda r: viewer.compare(
            [n for n in r.query.get("jobs", "").split(",") if n],
            _float(r, "alpha", 0.05), _int(r, "seed", 0)))),
        web.static("/static", STATIC, append_version=False),
    ]
    app = web.Application(middlewares=[guard])
    app.add_routes(routes)
    return app


async def start(jobs_dir: Path, port: int = 0,
                host: str = "127.0.0.1") -> tuple[web.AppRunner, int]:
    """Start serving; return the runner (call `cleanup()` to stop) and the bound port."""
    runner = web.AppRunner(make_app(jobs_dir), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    server = site._server
    assert server is not None
    bound = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, int(bound)


def serve(jobs_dir: Path, *, port: int = 0, open_browser: bool = True, path: str = "",
          on_ready: Callable[[str], None] | None = None) -> None:
    """Serve until interrupted (Ctrl-C or SIGTERM). `path` is the page to open first."""

    async def main() -> None:
        import signal

        runner, bound = await start(jobs_dir, port)
        url = f"http://127.0.0.1:{bound}/{path}"
        if on_ready:
            on_ready(url)
        if open_browser:
            await asyncio.to_thread(webbrowser.open, url)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            await runner.cleanup()

    asyncio.run(main())
