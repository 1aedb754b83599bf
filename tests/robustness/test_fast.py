"""analysis.fast finds the same first divergence per group as the object path
(load_job + matcher), on traces written by the real TraceWriter."""

from __future__ import annotations

import random
from pathlib import Path
from unittest import mock

import pytest

from ddpdoctor.analysis.causal.mismatch import divergences
from ddpdoctor.analysis.align.fast_scan import find_divergences_fast, scan
from ddpdoctor.analysis.load.run_dirs import load_job
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.writer import TraceWriter

SHAPES = ["10", "2x5", "3;4", "64", "-", "8x8"]


def write_rank(traces: Path, rank: int, calls: list[tuple], capacity: int,
               groups: dict[int, str], pid: int) -> None:
    with mock.patch("os.getpid", return_value=pid):
        w = TraceWriter(traces, "t", capacity=capacity)
    w.set_identity(rank, 4, rank)
    for idx, name in groups.items():
        w.meta("group", index=idx, name=name, ranks=[0, 1, 2, 3], size=4, default=idx == 0)
    seqs: dict[int, int] = {}
    for i, (group, op, reduce_op, peer, text) in enumerate(calls):
        seq = seqs.get(group, 0)
        seqs[group] = seq + 1
        h = w.append(int(L.RecordKind.COLLECTIVE), L.OP_CODES[op], L.REDUCE_OPS.index(reduce_op),
                     0, group, seq, 1000 + i, 0, 1, peer, rank, 0, -1, text)
        w.set_end(h, 2000 + i)
        if i % 7 == 3:  # other records in between
            w.append(int(L.RecordKind.BATCH), L.OP_CODES["batch"], 0, 0, 0, i, 5, 5, 1, -1, 0,
                     0, -1, b"batch")
    w.close()


def program(rnd: random.Random, n: int) -> list[tuple]:
    out = []
    for _ in range(n):
        op = rnd.choice(["all_reduce", "all_reduce", "broadcast", "barrier", "all_gather"])
        group = rnd.choice([0, 0, 0, 1])
        shapes = rnd.choice(SHAPES)
        text = f"{shapes}||float32|/job/train.py:{rnd.randint(1, 3)}".encode()
        out.append((group, op, "sum" if op == "all_reduce" else "",
                    0 if op == "broadcast" else -1, text))
    return out


def mutate(rnd: random.Random, calls: list[tuple]) -> list[tuple]:
    calls = list(calls)
    i = rnd.randrange(len(calls))
    group, op, red, peer, text = calls[i]
    how = rnd.choice(["op", "shape", "dtype", "root", "site", "numel_same"])
    if how == "op":
        op, red = ("broadcast", "") if op != "broadcast" else ("all_reduce", "sum")
    elif how == "shape":
        text = text.replace(b"|", b"1|", 1) if not text.startswith(b"-") else b"7" + text[1:]
    elif how == "dtype":
        text = text.replace(b"float32", b"float64")
    elif how == "root":
        peer = 1
    elif how == "site":  # only the call site differs: no divergence
        text = text.replace(b"train.py", b"other.py")
    else:  # the same numel in another shape: no divergence for all_reduce
        text = text.replace(b"2x5|", b"10|") if b"2x5|" in text else text
    calls[i] = (group, op, red, peer, text)
    return calls


def _summary(divs) -> list[tuple]:
    return [(d.group, d.seq, d.state.value, d.culprits, tuple(sorted(d.calls))) for d in divs]


@pytest.mark.parametrize("seed", range(40))
def test_fast_path_agrees_with_the_object_path(tmp_path, seed):
    rnd = random.Random(seed)
    base = program(rnd, rnd.randint(5, 60))
    capacity = rnd.choice([8, 32, 128])  # 8 and 32: rings that wrapped
    run_dir = tmp_path / "run"
    traces = run_dir / "traces"
    traces.mkdir(parents=True)
    for rank in range(4):
        calls = base
        if rnd.random() < 0.6:
            calls = mutate(rnd, base)
        if rnd.random() < 0.2:
            calls = calls[: rnd.randint(1, len(calls))]  # a rank that stopped early
        write_rank(traces, rank, calls, capacity, {0: "0", 1: "7"}, 9000 + rank)
    slow = _summary(divergences(load_job([run_dir], stacks=False)))
    fast = _summary(find_divergences_fast([run_dir]))
    assert fast == slow


def test_fast_path_merges_nodes_and_keeps_the_newest_incarnation(tmp_path):
    calls = [(0, "all_reduce", "sum", -1, b"10||float32|/job/t.py:1")] * 20
    bad = list(calls)
    bad[12] = (0, "all_reduce", "sum", -1, b"11||float32|/job/t.py:1")
    for node, ranks in ((0, (0, 1)), (1, (2, 3))):
        traces = tmp_path / f"node{node}" / "traces"
        traces.mkdir(parents=True)
        for r in ranks:
            write_rank(traces, r, bad if r == 3 else calls, 64, {0: "0"}, 100 + r)
    # an older incarnation of rank 3 (a restart) that diverged elsewhere is ignored
    old = list(calls)
    old[2] = (0, "broadcast", "", 0, b"10||float32|/job/t.py:1")
    with mock.patch("time.time_ns", return_value=1):
        write_rank(tmp_path / "node1" / "traces", 3, old, 64, {0: "0"}, 50)
    result = scan([tmp_path / "node0", tmp_path / "node1"])
    assert result.ranks == 4
    [div] = result.divergences
    assert (div.seq, div.culprits, div.state.value) == (12, (3,), "shape")
    assert sorted(div.calls) == [0, 1, 2, 3]
