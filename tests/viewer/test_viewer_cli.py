"""`sandlot view` as a command: the address it prints, --port, a job folder given directly."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx

from .viewer_support import run_report, viewer_process, write_config, write_result


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_view_prints_its_local_address_and_serves_the_jobs(tmp_path: Path) -> None:
    write_config(tmp_path / "jobs" / "j1", ["t"])
    write_result(tmp_path / "jobs" / "j1", "t")
    with viewer_process(tmp_path / "jobs") as url:
        assert url.startswith("http://127.0.0.1:")
        jobs = httpx.get(url + "api/jobs").json()["jobs"]
        assert [j["name"] for j in jobs] == ["j1"]


def test_view_uses_the_port_asked_for(tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir()
    port = free_port()
    with viewer_process(tmp_path / "jobs", "--port", str(port)) as url:
        assert url == f"http://127.0.0.1:{port}/"
        assert httpx.get(url).status_code == 200


def test_view_of_one_job_folder_opens_that_job(tmp_path: Path) -> None:
    write_config(tmp_path / "jobs" / "mine", ["t"])
    with viewer_process(tmp_path / "jobs" / "mine") as url:
        assert url.endswith("/#/job/mine")


def test_view_of_a_missing_folder_fails_with_a_message(tmp_path: Path) -> None:
    out = run_report("view", str(tmp_path / "none"), "--no-browser")
    assert out.returncode == 2 and "is not a folder" in out.stdout
