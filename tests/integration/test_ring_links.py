"""The ring's shared-memory links: taken where every rank can, gloo's send/recv otherwise; a
peer that leaves, disagrees or stays away is a clear error, never a hang."""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from tests.integration.jobs.ports import free_port
from tests.integration.spawned import end_job, run_job


def _init(rank: int, world: int, port: int, timeout_s: float = 300.0) -> Any:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=timeout_s))
    return dist.group.WORLD


def _write(out_dir: str, rank: int, res: dict[str, Any]) -> None:
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(res))


def _read(out_dir: Path, world: int) -> list[dict[str, Any]]:
    return [json.loads((out_dir / f"rank{r}.json").read_text()) for r in range(world)]


def _timed_ring_call(x: torch.Tensor, pg: Any) -> dict[str, Any]:
    """One ring call: its error (None) and how long it took."""
    from ddpdoctor.ddp.ring import ring_all_reduce_flat

    t0 = time.monotonic()
    try:
        ring_all_reduce_flat(x, pg, "sum")
        error = None
    except RuntimeError as exc:
        error = str(exc)
    return {"error": error, "seconds": time.monotonic() - t0}


def agree_job(rank: int, world: int, port: int, out_dir: str, odd_rank: int,
              odd_env: dict[str, str]) -> None:
    if rank == odd_rank:
        os.environ.update(odd_env)
    from ddpdoctor.ddp import shm_link
    from ddpdoctor.ddp.ring import ring_all_reduce_flat

    pg = _init(rank, world, port)
    res: dict[str, Any] = {}
    g = torch.Generator().manual_seed(rank)
    for numel in (1, 1001, 1_500_007):  # one piece, and several slots' worth (6 MB)
        x = torch.randn(numel, generator=g)
        ref = x.clone()
        dist.all_reduce(ref)
        ring_all_reduce_flat(x, pg, "sum", scale=0.5)
        every = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(every, x)
        res[str(numel)] = {
            "close": bool(torch.allclose(x, ref * 0.5, rtol=1e-6, atol=1e-6)),
            "same_bits": all(torch.equal(t.view(torch.int32), every[0].view(torch.int32))
                             for t in every)}
    res["links"] = shm_link.links_for(pg) is not None
    _write(out_dir, rank, res)
    end_job()


@pytest.mark.parametrize("world,odd_rank,odd_env", [
    (2, -1, {}), (3, -1, {}),
    (3, 1, {"DDPDOCTOR_RING_TRANSPORT": "gloo"}),  # one rank turned them off
    (2, 1, {"DDPDOCTOR_RING_SLOT_BYTES": "65536"}),  # slots of another size
    (2, 0, {"DDPDOCTOR_RING_SLOT_BYTES": "2M"}),  # mistyped: the default, links kept
])
def test_links_are_used_only_where_every_rank_can(world: int, odd_rank: int,
                                                  odd_env: dict[str, str],
                                                  tmp_path: Path) -> None:
    run_job(agree_job, world, str(tmp_path), odd_rank, odd_env)
    res = _read(tmp_path, world)
    linked = odd_rank < 0 or odd_env.get("DDPDOCTOR_RING_SLOT_BYTES") == "2M"
    assert [r["links"] for r in res] == [linked] * world  # all or none
    for r in res:
        for numel in ("1", "1001", "1500007"):
            assert r[numel] == {"close": True, "same_bits": True}, (numel, r)


def leaver_job(rank: int, world: int, port: int, out_dir: str) -> None:
    from ddpdoctor.ddp.ring import ring_all_reduce_flat

    pg = _init(rank, world, port)
    x = torch.ones(100_000)
    ring_all_reduce_flat(x, pg, "sum")  # the links are made
    if rank == 1:
        child = os.fork()  # like a DataLoader worker: it must not keep rank 1's links open
        if child == 0:
            time.sleep(8)  # outlives the survivor's check
            os._exit(0)
        _write(out_dir, rank, {"child": child})
        os._exit(0)
    time.sleep(0.5)
    _write(out_dir, rank, _timed_ring_call(x, pg))
    os._exit(0)


def test_a_rank_that_leaves_is_heard_at_once_even_with_a_forked_child(tmp_path: Path) -> None:
    run_job(leaver_job, 2, str(tmp_path))
    res = _read(tmp_path, 2)
    try:
        assert res[0]["error"] and "connection closed by peer rank 1" in res[0]["error"]
        assert res[0]["seconds"] < 5
    finally:
        try:
            os.kill(res[1]["child"], signal.SIGKILL)
        except ProcessLookupError:
            pass


def mismatch_job(rank: int, world: int, port: int, out_dir: str, members: list[int]) -> None:
    from ddpdoctor.ddp.ring import ring_all_reduce_flat

    pg = _init(rank, world, port)
    if members:
        pg = dist.new_group(members)
        if rank not in members:
            _write(out_dir, rank, {})
            end_job()
            return
    ring_all_reduce_flat(torch.ones(10), pg, "sum")
    try:
        ring_all_reduce_flat(torch.ones(1000 * (dist.get_group_rank(pg, rank) + 1)), pg, "sum")
        res: dict[str, Any] = {"error": None}
    except RuntimeError as exc:
        res = {"error": str(exc)}
    try:
        ring_all_reduce_flat(torch.ones(10), pg, "sum")
        res["after"] = None
    except RuntimeError as exc:
        res["after"] = str(exc)
    _write(out_dir, rank, res)
    end_job()


@pytest.mark.parametrize("world,members", [(2, []), (3, [1, 2])])
def test_ranks_that_reduce_different_sizes_get_an_error_that_says_so(
        world: int, members: list[int], tmp_path: Path) -> None:
    run_job(mismatch_job, world, str(tmp_path), members)
    res = _read(tmp_path, world)[world - 2:]  # the two ranks of the group
    first, second = members or [0, 1]  # named by their global ranks
    assert (f"rank {second} reduces a tensor of 8000 bytes where this rank has 4000"
            in res[0]["error"])
    assert (f"rank {first} reduces a tensor of 4000 bytes where this rank has 8000"
            in res[1]["error"])
    assert all(r["after"] == r["error"] for r in res)  # the link stays broken, said again


def timeout_job(rank: int, world: int, port: int, out_dir: str) -> None:
    from ddpdoctor.ddp.ring import ring_all_reduce_flat

    pg = _init(rank, world, port, timeout_s=2.0)
    ring_all_reduce_flat(torch.ones(10), pg, "sum")
    stayed_away = None
    if rank == 1:  # away, alive, until rank 0 has given up (at most 60 s)
        deadline = time.monotonic() + 60
        while not Path(out_dir, "rank0.json").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        stayed_away = Path(out_dir, "rank0.json").exists()
    res = _timed_ring_call(torch.ones(10), pg)
    _write(out_dir, rank, {**res, "stayed_away": stayed_away})
    os._exit(0)


def test_a_rank_that_stays_away_times_out_after_the_groups_timeout(tmp_path: Path) -> None:
    """Rank 1 does not come back before rank 0 has given up: rank 0's error can only be
    its own timeout, after the group's 2 s, not rank 1's return or exit."""
    run_job(timeout_job, 2, str(tmp_path))
    res = _read(tmp_path, 2)
    assert res[1]["stayed_away"] is True
    assert "for 2 s (the group's timeout)" in res[0]["error"]
    assert res[0]["seconds"] > 1.5


def two_groups_job(rank: int, world: int, port: int, out_dir: str) -> None:
    import threading

    from ddpdoctor.ddp.ring import ring_all_reduce_flat

    _init(rank, world, port)
    groups = [dist.new_group([0, 1]), dist.new_group([0, 1])]
    done: dict[int, float] = {}

    def call(i: int, delay: float) -> None:
        time.sleep(delay)
        x = torch.full((1000,), float(i + 1))
        ring_all_reduce_flat(x, groups[i], "sum")
        done[i] = x[0].item()

    first = rank  # rank 0 sets up group 0 first, rank 1 group 1: the opposite orders
    threads = [threading.Thread(target=call, args=(i, 0.0 if i == first else 0.3),
                                daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    _write(out_dir, rank, {str(i): v for i, v in done.items()})
    if len(done) == 2:
        end_job()
    os._exit(0)


def test_two_groups_set_up_from_two_threads_in_opposite_orders(tmp_path: Path) -> None:
    run_job(two_groups_job, 2, str(tmp_path))
    assert _read(tmp_path, 2) == [{"0": 2.0, "1": 4.0}] * 2


RING_JOB = Path(__file__).resolve().parents[1] / "robustness" / "jobs" / "ring_job.py"


def test_each_groups_transport_is_recorded_reported_and_shown(tmp_path: Path) -> None:
    """Rank 1 alone asks for gloo: the group runs over gloo on both ranks, and the trace, the
    report and the TUI's summary say so, each rank with its reason."""
    import subprocess
    import sys

    from ddpdoctor.trace.reader import read_meta
    from ddpdoctor.tui.model import ReportView
    from ddpdoctor.tui.widgets.run_summary import summary_text

    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "ddpdoctor.cli", "run", "--run-dir", str(run_dir),
         "--nproc-per-node", "2", "--master-port", str(free_port()), str(RING_JOB)],
        env={**os.environ, "GLOO_ON_RANK": "1"}, capture_output=True, text=True,
        timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    events = [e for meta in (run_dir / "traces").glob("*.meta.jsonl")
              for e in read_meta(meta)[0] if e.get("event") == "transport"]
    assert sorted((e["transport"], e["why"]) for e in events) == [
        ("gloo", "DDPDOCTOR_RING_TRANSPORT asks for gloo"),
        ("gloo", "the left neighbour offers no shared memory")]
    report = json.loads((run_dir / "report.json").read_text())
    by_rank = {t["ranks"][0]: t for t in report["transports"]}
    assert by_rank[1]["why"] == "DDPDOCTOR_RING_TRANSPORT asks for gloo"
    assert by_rank[0]["why"] == "the left neighbour offers no shared memory"
    assert all(t["group_ranks"] == [0, 1] and t["refused"] == [] for t in by_rank.values())
    shown = summary_text(ReportView.from_dict(report), 0.0, 400).plain
    assert "gradients: group 0 over gloo (TCP) (" in shown and "asks for gloo" in shown




def test_the_rings_sockets_are_closed_as_a_rank_ends(tmp_path: Path) -> None:
    """A user who runs with warnings on (python -X dev, pytest -W error) sees no
    ResourceWarning of ddpdoctor's: the shared-memory ring's sockets close at the rank's exit."""
    import subprocess
    import sys

    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "ddpdoctor.cli", "run", "--run-dir", str(run_dir),
         "--nproc-per-node", "2", "--master-port", str(free_port()), str(RING_JOB)],
        env={**os.environ, "PYTHONWARNINGS": "always::ResourceWarning"},
        capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    transports = json.loads((run_dir / "report.json").read_text())["transports"]
    assert transports and all(t["transport"] == "shm" for t in transports), transports
    assert "ResourceWarning" not in done.stderr + done.stdout, done.stderr[-3000:]
