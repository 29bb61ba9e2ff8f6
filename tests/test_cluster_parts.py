"""The pieces of a cluster run that need no cluster: folders as archives, the slot pool's
order, the live view's copy, the job's spend summed over nodes, a node's slots."""

from __future__ import annotations

import asyncio
import io
import os
import tarfile
from pathlib import Path

import pytest

from sandlot.executors.cluster_spend import ClusterSpend
from sandlot.executors.live_mirror import apply, capture
from sandlot.executors.node import NodeReport
from sandlot.executors.ray_cluster import (
    ClusterNode,
    NoNodeLeft,
    TrialNeeds,
    _Node,
    _SlotPool,
)
from sandlot.executors.shipping import OMITTED_NOTE, pack_tree, unpack_tree
from sandlot.gateway.budget import Budget, JobSpend
from sandlot.gateway.faults import FATAL_FAULTS
from sandlot.gateway.formats.base import Usage
from sandlot.gateway.health import ProviderFailure
from sandlot.gateway.usage import LiveUsage
from sandlot.live import NodeLive, TrialLive

pytestmark = [pytest.mark.timeout(60)]


def test_a_folder_travels_whole_with_modes_links_and_empty_folders(tmp_path: Path) -> None:
    src = tmp_path / "task"
    (src / "tests" / "empty").mkdir(parents=True)
    (src / "tests" / "test.sh").write_text("echo 1\n")
    (src / "tests" / "test.sh").chmod(0o755)
    (src / "instruction.md").write_text("do it\n")
    (src / "link").symlink_to("instruction.md")
    packed = pack_tree(src, max_bytes=1 << 20)
    assert packed.omitted == ()
    unpack_tree(packed.data, tmp_path / "copy")
    copy = tmp_path / "copy"
    assert (copy / "tests" / "test.sh").read_text() == "echo 1\n"
    assert os.access(copy / "tests" / "test.sh", os.X_OK)
    assert (copy / "tests" / "empty").is_dir()
    assert os.readlink(copy / "link") == "instruction.md"


def test_past_the_cap_files_are_left_out_and_named(tmp_path: Path) -> None:
    src = tmp_path / "trial"
    src.mkdir()
    (src / "small.txt").write_text("x" * 100)
    (src / "huge.log").write_bytes(b"y" * 5000)
    (src / "result.json").write_text("{}")
    packed = pack_tree(src, max_bytes=1000, exclude=frozenset({"result.json"}))
    assert packed.omitted == ("huge.log",)
    unpack_tree(packed.data, tmp_path / "copy")
    names = sorted(p.name for p in (tmp_path / "copy").iterdir())
    assert names == [OMITTED_NOTE, "small.txt"]
    assert "huge.log" in (tmp_path / "copy" / OMITTED_NOTE).read_text()


def one_file_archive(member: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo(member)
        info.size = 3
        tar.addfile(info, io.BytesIO(b"bad"))
    return buffer.getvalue()


def test_an_archive_cannot_write_outside_its_folder(tmp_path: Path) -> None:
    with pytest.raises(tarfile.TarError):
        unpack_tree(one_file_archive("../escape.txt"), tmp_path / "dest")
    assert not (tmp_path / "escape.txt").exists()
    unpack_tree(one_file_archive("/tmp/escape.txt"), tmp_path / "dest")
    assert (tmp_path / "dest" / "tmp" / "escape.txt").read_bytes() == b"bad"  # made relative


def test_a_link_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("shadow")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/shadow"
        tar.addfile(info)
    with pytest.raises(tarfile.TarError):
        unpack_tree(buffer.getvalue(), tmp_path / "dest")


def node(name: str, slots: int) -> _Node:
    return _Node(ClusterNode(name, name, float(slots), 0.0), actor=None,
                 live=NodeLive(name, slots))


def test_the_pool_serves_in_order_spreads_over_nodes_and_keeps_the_cap() -> None:
    async def body() -> None:
        a, b = node("a", 2), node("b", 2)
        pool = _SlotPool([a, b], cap=3)
        got = [await pool.acquire() for _ in range(3)]
        assert sorted(n.host for n in got) == ["a", "a", "b"]  # spread: most free first
        waiting = [asyncio.create_task(pool.acquire()) for _ in range(2)]
        await asyncio.sleep(0)
        assert not any(w.done() for w in waiting)  # the cap, not the nodes, holds them
        pool.release(got[0])
        await asyncio.sleep(0)
        assert waiting[0].done() and not waiting[1].done()  # first come, first served
        waiting[1].cancel()
        await asyncio.sleep(0)
        pool.release(got[1])
        assert a.live.running + b.live.running == 2

    asyncio.run(body())


def test_a_dead_node_gets_no_more_tries_and_with_none_left_nobody_waits() -> None:
    async def body() -> None:
        a, b = node("a", 1), node("b", 1)
        pool = _SlotPool([a, b], cap=10)
        pool.lost(b)
        first = await pool.acquire()
        assert first is a
        second = asyncio.create_task(pool.acquire())
        await asyncio.sleep(0)
        assert not second.done()
        pool.release(first)
        assert (await second) is a
        third = asyncio.create_task(pool.acquire())
        await asyncio.sleep(0)
        pool.lost(a)
        with pytest.raises(NoNodeLeft):
            await third
        with pytest.raises(NoNodeLeft):
            await pool.acquire()

    asyncio.run(body())


def test_slots_come_from_cpus_and_memory() -> None:
    big = ClusterNode("n", "n", cpus=8, memory_bytes=16 * 1024**3)
    assert TrialNeeds(cpus=1).slots_on(big) == 8
    assert TrialNeeds(cpus=2, memory_mb=4096).slots_on(big) == 4
    assert TrialNeeds(cpus=1, memory_mb=8192).slots_on(big) == 2
    assert TrialNeeds(cpus=16).slots_on(big) == 0


def test_the_drivers_live_view_follows_the_nodes() -> None:
    on_node = TrialLive("t__1", "t", 1)
    on_node.set_phase("creating sandbox")
    on_node.set_phase("agent running")
    on_node.agent.tool_started("bash")
    on_node.agent.tokens_reported(120)
    on_node.gateway_usage = LiveUsage()
    on_node.gateway_usage.begin()
    on_node.gateway_usage.finish(Usage(input_tokens=100, output_tokens=20), 0.5, 0, True)
    on_driver = TrialLive("t__1", "t", 1)
    apply(capture(on_node), on_driver)
    assert on_driver.phase == "agent running"
    assert on_driver.phase_log == ["creating sandbox", "agent running"]
    assert on_driver.agent.tool_calls == 1 and on_driver.agent.last_tool == "bash"
    assert on_driver.live_tokens() == 120
    version = on_driver.gateway_usage.version
    apply(capture(on_node), on_driver)
    assert on_driver.gateway_usage.version == version  # nothing moved: no redraw
    assert on_driver.gateway_usage.snapshot()["cost_usd"] == 0.5


def test_the_jobs_spend_is_the_sum_of_every_nodes_and_a_fatal_answer_stops_it() -> None:
    async def body() -> None:
        spend = ClusterSpend(Budget(max_tokens=1000), "openai/x", "OPENAI_API_KEY")
        spend.job_spend.add(50, 0.0)  # an earlier run's, on resume
        spend.absorb_report("a", NodeReport({}, spent_tokens=300, spent_cost_usd=0.1))
        spend.absorb("b", 200, 0.0)
        spend.absorb("a", 250, 0.05)  # older than what was counted: changes nothing
        spend.absorb_report("a", NodeReport({}, spent_tokens=400, spent_cost_usd=0.2))
        assert spend.job_spend.tokens == 650 and spend.job_spend.reason is None
        assert spend.elsewhere("a") == (250, pytest.approx(0.0))  # b's and the earlier run's
        assert spend.elsewhere("c") == (650, pytest.approx(0.2))
        spend.absorb("b", 550, 0.0)
        assert spend.job_spend.tokens == 1000
        assert "1,000 tokens" in await spend.job_spend.wait_reached()
        failure = ProviderFailure(next(iter(FATAL_FAULTS)), 401, "the key was refused")
        spend.absorb_report("a", NodeReport({}, 400, 0.2, provider_failure=failure))
        assert (await spend.health.wait_fatal()).message == "the key was refused"

    asyncio.run(body())


def test_a_nodes_gateway_holds_the_job_budget_against_its_own_and_the_others_spend() -> None:
    spend = JobSpend(Budget(max_tokens=1000))
    spend.add(400, None)
    spend.count_elsewhere(500, 0.0)
    assert spend.reason is None and spend.tokens == 400  # its own, as the node reports it
    spend.count_elsewhere(600, 0.0)  # the driver's newer sum replaces the last
    assert spend.reason is not None and "1,000 tokens of 1,000" in spend.reason
