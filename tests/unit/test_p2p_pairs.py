"""Point-to-point calls that cannot meet: a send and a recv of different sizes, a pair where
one side sends fewer than the other receives and went on (a skipped micro-batch); and the
real cycle (both ranks in recv on each other), which stays a deadlock."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ddpdoctor.analysis.engine import analyze
from ddpdoctor.analysis.model import FindingKind, Severity
from ddpdoctor.trace import layout as L
from tests.unit.factory import flow_site, job, rank, rec, recv, segment, send


def _first_error(findings):
    return next(f for f in findings if f.severity == Severity.ERROR)


def test_a_send_and_a_recv_of_different_sizes_are_a_mismatch_not_a_cycle() -> None:
    """Rank 0 sends full micro-batches; rank 1 expects a short last one and is aborted by
    gloo on the size: the receiver (its buffer is its word on what arrives), both lines."""
    r0 = rank(0, [send(i, 1, t=i, dur=0.01) for i in range(3)], state=L.RankState.EXITED,
              returncode=0)
    recvs = [recv(i, 0, t=i, dur=0.01) for i in range(2)]
    recvs.append(replace(recv(2, 0, t=2, dur=None), in_shapes=((2,),)))
    r1 = rank(1, recvs, state=L.RankState.FAILED, fault="Fatal Python error: Aborted",
              returncode=-6)
    f = _first_error(analyze(job([r0, r1])))
    assert f.kind == FindingKind.COLLECTIVE_MISMATCH and f.ranks == (1,)
    assert f.evidence["p2p"]["what"] == "size" and "no_majority" not in f.evidence
    assert "float32[4]" in f.summary and "float32[2]" in f.summary
    assert "deadlock" not in f.summary and "process groups" not in f.fix


def test_a_stage_that_skipped_a_micro_batch_is_named_at_its_continue(tmp_path: Path) -> None:
    """Rank 0's `continue` on an empty micro-batch (recorded: taken once) means it sent 3
    tensors where rank 1 receives 4; rank 0 went on to the barrier."""
    src = tmp_path / "pipe.py"
    src.write_text("def stage(rank, batches, dist):\n"
                   "    for mb in batches:\n"
                   "        if rank == 0:\n"
                   "            if mb.sum() == 0:\n"
                   "                continue\n"
                   "            dist.send(mb, dst=1)\n"
                   "        else:\n"
                   "            dist.recv(mb, src=0)\n"
                   "    dist.barrier()\n")
    meta = [flow_site(0, str(src), 4, fall=5, jump=6)]
    sends = [replace(send(i, 1, t=i, dur=0.01), callsite=f"{src}:6") for i in range(3)]
    r0 = rank(0, sends + [segment(0, -1, None, "0.1.3"),
                          rec(0, "barrier", t=5, dur=None, site=f"{src}:9")], meta=meta)
    recvs = [replace(recv(i, 0, t=i, dur=0.01), callsite=f"{src}:8") for i in range(3)]
    recvs.append(replace(recv(3, 0, t=4, dur=None), callsite=f"{src}:8"))
    r1 = rank(1, recvs)
    f = _first_error(analyze(job([r0, r1])))
    assert f.kind == FindingKind.COLLECTIVE_MISMATCH and f.ranks == (0,), f.summary
    assert f.evidence["p2p"] | {} and f.evidence["p2p"]["sent"] == 3
    assert "pipe.py:4" in f.summary and "no_majority" not in f.evidence
    assert "process groups" not in f.fix


def test_two_ranks_each_receiving_first_stay_a_deadlock() -> None:
    r0 = rank(0, [recv(0, 1, t=1, dur=None)])
    r1 = rank(1, [recv(0, 0, t=1, dur=None)])
    f = _first_error(analyze(job([r0, r1])))
    assert f.kind == FindingKind.DEADLOCK and f.ranks == (0, 1)
    assert "send" in f.fix.lower() and "process groups" not in f.fix
