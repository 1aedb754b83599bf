"""The ring all-reduce agrees with gloo's, on any group, and shows up in the trace."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from tests.integration.spawned import end_job, run_job

SIZES = [0, 1, 3, 7, 1001, 65537]


def _init(rank: int, world: int, port: int) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)


def _check(name: str, ours: torch.Tensor, ref: torch.Tensor, errors: list[str]) -> None:
    if ours.shape != ref.shape or not torch.allclose(ours, ref, rtol=1e-6, atol=1e-6):
        errors.append(f"{name}: max diff {(ours.double() - ref.double()).abs().max()}")


def _check_same_everywhere(name: str, ours: torch.Tensor, errors: list[str]) -> None:
    """Every rank holds the same bits (DDP replicas must not drift apart)."""
    got = [torch.empty_like(ours) for _ in range(dist.get_world_size())]
    dist.all_gather(got, ours)
    if not all(torch.equal(t.view(torch.int32), got[0].view(torch.int32)) for t in got):
        errors.append(f"{name}: ranks differ")


def ring_job(rank: int, world: int, port: int, out_dir: str, transport: str) -> None:
    os.environ["DDPDOCTOR_RING_TRANSPORT"] = transport  # read at the group's first call
    from ddpdoctor import ring
    from ddpdoctor.ddp import shm_link
    from ddpdoctor.ddp.ring import ring_all_reduce_flat

    _init(rank, world, port)
    pg = dist.group.WORLD
    errors: list[str] = []
    g = torch.Generator().manual_seed(rank)
    for numel in SIZES:
        for op, ref_op in (("sum", dist.ReduceOp.SUM), (dist.ReduceOp.MAX, dist.ReduceOp.MAX),
                           (dist.ReduceOp.MIN, dist.ReduceOp.MIN),
                           ("product", dist.ReduceOp.PRODUCT)):
            x = torch.rand(numel, generator=g) + 0.5
            ours, ref = x.clone(), x.clone()
            ring.all_reduce(ours, op=op)
            dist.all_reduce(ref, op=ref_op)
            _check(f"{op} numel={numel}", ours, ref, errors)
        x = torch.randn(numel, generator=g, dtype=torch.float64)
        ours, ref = x.clone(), x.clone()
        ring.all_reduce(ours, op=dist.ReduceOp.AVG)
        dist.all_reduce(ref)
        _check(f"avg float64 numel={numel}", ours, ref / world, errors)
        x = torch.randint(-1000, 1000, (numel,), generator=g)
        ours, ref = x.clone(), x.clone()
        seg = 24 if numel < 2000 else 4096  # many segments, so the pipeline is exercised
        ring_all_reduce_flat(ours, pg, "sum", segment_bytes=seg, gather_bytes=0)
        dist.all_reduce(ref)
        _check(f"int64 tiny segments numel={numel}", ours, ref, errors)
        for gather_bytes in (0, 1 << 30):  # both rings: equal to gloo, the same on every rank
            x = torch.randn(numel, generator=g)
            ours, ref = x.clone(), x.clone()
            ring_all_reduce_flat(ours, pg, "sum", gather_bytes=gather_bytes)
            dist.all_reduce(ref)
            _check(f"float32 gather_bytes={gather_bytes} numel={numel}", ours, ref, errors)
            _check_same_everywhere(f"gather_bytes={gather_bytes} numel={numel}", ours, errors)
    base = torch.randn(6, 7, generator=g)
    ours = base[:, ::2]  # not contiguous: reduced in place all the same
    ref = ours.contiguous()
    ring.all_reduce(ours)
    dist.all_reduce(ref)
    _check("non-contiguous", ours, ref, errors)
    s = torch.tensor(float(rank + 1))
    ring.all_reduce(s)
    _check("0-d", s, torch.tensor(float(world * (world + 1) // 2)), errors)
    if world > 1 and (shm_link.links_for(pg) is None) != (transport == "gloo"):
        errors.append(f"transport {transport}: links {shm_link.links_for(pg)}")
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(errors))
    end_job()


@pytest.mark.parametrize("transport", ["auto", "gloo"])  # shared memory here; gloo's p2p
@pytest.mark.parametrize("world", [1, 2, 3])  # 4 ranks: the DDP equivalence job
def test_ring_all_reduce_matches_gloo(world: int, transport: str, tmp_path: Path) -> None:
    run_job(ring_job, world, str(tmp_path), transport)
    for r in range(world):
        assert json.loads((tmp_path / f"rank{r}.json").read_text()) == []


def large_job(rank: int, world: int, port: int, out_dir: str, transport: str) -> None:
    os.environ["DDPDOCTOR_RING_TRANSPORT"] = transport
    from ddpdoctor import ring

    _init(rank, world, port)
    errors: list[str] = []
    numel = 25 * (1 << 20) + 3  # 100 MB of float32, odd: segments and chunks uneven
    x = torch.randn(numel, generator=torch.Generator().manual_seed(rank))
    ref = x.clone()
    ring.all_reduce(x)
    dist.all_reduce(ref)
    _check("100 MB", x, ref, errors)
    _check_same_everywhere("100 MB", x, errors)
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(errors))
    end_job()


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["auto", "gloo"])
def test_ring_all_reduce_100_mb(transport: str, tmp_path: Path) -> None:
    run_job(large_job, 2, str(tmp_path), transport)
    for r in range(2):
        assert json.loads((tmp_path / f"rank{r}.json").read_text()) == []


def subgroup_job(rank: int, world: int, port: int, out_dir: str) -> None:
    from ddpdoctor import ring
    from ddpdoctor.ddp.wrapper import DistributedDataParallel

    _init(rank, world, port)
    members = [0, 2]
    group = dist.new_group(members)
    res: dict[str, Any] = {}
    x = torch.arange(10, dtype=torch.float32) * (rank + 1)
    ring.all_reduce(x, group=group)  # rank 1 is not in the group: a no-op there
    res["ring"] = x.tolist()
    if rank in members:  # DDP over the subgroup: 0 and 2 average, 1 is not involved
        torch.manual_seed(rank)
        model = DistributedDataParallel(torch.nn.Linear(4, 3), process_group=group)
        model(torch.full((1, 4), float(rank))).sum().backward()
        res["weight"] = model.module.weight.detach().tolist()
        res["grad"] = model.module.weight.grad.tolist()
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(res))
    end_job()


def test_subgroup_of_two_out_of_three(tmp_path: Path) -> None:
    run_job(subgroup_job, 3, str(tmp_path))
    res = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(3)]
    base = list(range(10))
    assert res[0]["ring"] == [4.0 * v for v in base] == res[2]["ring"]
    assert res[1]["ring"] == [2.0 * v for v in base]
    assert res[0]["weight"] == res[2]["weight"]  # broadcast from group rank 0
    assert res[0]["grad"] == res[2]["grad"]
    assert res[0]["grad"][0] == pytest.approx([1.0] * 4)  # mean of inputs 0 and 2
    assert "weight" not in res[1]


def traced_job(rank: int, world: int, port: int, run_dir: str, steps: int,
               mode: str = "ring") -> None:
    os.environ["DDPDOCTOR_RUN_DIR"] = run_dir
    from ddpdoctor.ddp import swap as ddp_swap
    from ddpdoctor.runtime import recorder

    ddp_swap.install(mode)
    DistributedDataParallel = torch.nn.parallel.DistributedDataParallel

    _init(rank, world, port)
    rec = recorder.active()
    rec.set_identity(rank, world, rank)
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(4)])
    ddp = DistributedDataParallel(model, bucket_cap_mb=0.3)
    for step in range(steps):
        ddp(torch.randn(8, 256)).sum().backward()
        rec.set_step(step + 1)
    end_job()


def test_trace_has_one_bucket_collective_per_bucket_with_its_ring_steps(tmp_path: Path) -> None:
    from ddpdoctor.trace import layout as L
    from ddpdoctor.trace.reader import read_trace

    world, steps = 2, 3
    run_job(traced_job, world, str(tmp_path), steps)
    traces = [read_trace(p) for p in sorted((tmp_path / "traces").glob("*.ring"))]
    traces = [t for t in traces if t.header.rank >= 0]
    assert sorted(t.header.rank for t in traces) == [0, 1]
    bucket_seqs = []
    for t in traces:
        colls = [r for r in t.records if r.kind == L.RecordKind.COLLECTIVE]
        buckets = [r for r in colls if r.flags & L.RecordFlag.BUCKET]
        assert all(r.op == "all_reduce" and not r.open for r in buckets)
        assert all("test_ring_allreduce.py:" in r.callsite for r in buckets)
        # Step 1 reduces everything in one bucket, then buckets of 0.3 MB (rebuilt).
        total = 4 * (256 * 256 + 256)
        assert buckets[0].numel == total and buckets[0].aux == 0
        per_step, acc = [], []
        for r in buckets[1:]:
            acc.append(r.aux)
            if sum(b.numel for b in buckets[1:][len(sum(per_step, [])):][:len(acc)]) == total:
                per_step.append(acc)
                acc = []
        assert acc == [] and len(per_step) == steps - 1
        assert all(p == list(range(len(per_step[0]))) for p in per_step)
        assert len(per_step[0]) >= 2
        steps_by_parent: dict[int, list] = {}
        for r in t.records:
            if r.kind == L.RecordKind.RING_STEP:
                steps_by_parent.setdefault(r.parent, []).append(r)
        for b in buckets:
            ring_steps = steps_by_parent.get(b.seq, [])
            assert {s.op for s in ring_steps} == {"ring_send", "ring_recv"}
            assert all(not s.open and s.peer == 1 - t.header.rank for s in ring_steps)
            assert sum(s.nbytes for s in ring_steps if s.op == "ring_recv") == b.numel * 4
        assert any(r.op == "broadcast" for r in colls)  # construction and rebuild
        bucket_seqs.append([(r.seq, r.aux, r.numel) for r in buckets])
    assert bucket_seqs[0] == bucket_seqs[1]  # the ranks agree bucket by bucket


def test_torch_mode_records_torch_ddp_buckets(tmp_path: Path) -> None:
    from ddpdoctor.trace import layout as L
    from ddpdoctor.trace.reader import read_trace

    steps = 3
    run_job(traced_job, 2, str(tmp_path), steps, "torch")
    traces = [read_trace(p) for p in sorted((tmp_path / "traces").glob("*.ring"))]
    per_rank = []
    for t in [t for t in traces if t.header.rank >= 0]:
        buckets = [r for r in t.records if r.kind == L.RecordKind.COLLECTIVE
                   and r.flags & L.RecordFlag.BUCKET]
        assert buckets and all(r.op == "all_reduce" and not r.open for r in buckets)
        assert buckets[0].numel == 4 * (256 * 256 + 256)  # torch's first step: one bucket
        assert all("test_ring_allreduce.py:" in r.callsite for r in buckets)
        per_rank.append([(r.seq, r.aux, r.numel) for r in buckets])
    assert len(per_rank) == 2 and per_rank[0] == per_rank[1]
