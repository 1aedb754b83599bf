"""Matching the ranks' collectives: one state per case, and blame that follows the evidence."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ddpdoctor.analysis.align.matcher import MatchState, blame, compare, find_divergence
from ddpdoctor.analysis.model import Call
from ddpdoctor.analysis.load.user_source import rank_condition


def make_call(rank: int = 0, seq: int = 0, op: str = "all_reduce", shapes=((10,),),
              dtype: str = "float32", reduce_op: str = "sum", peer: int = -1,
              out_shapes=(), callsite: str = "train.py:1", t_end: int = 2) -> Call:
    return Call(rank=rank, group="0", seq=seq, op=op, reduce_op=reduce_op,
                in_shapes=tuple(shapes), out_shapes=tuple(out_shapes), dtypes=(dtype,),
                peer=peer, callsite=callsite, t_start=1, t_end=t_end)


@pytest.mark.parametrize("a,b,state", [
    (make_call(), make_call(rank=1), MatchState.MATCH),
    (make_call(), make_call(rank=1, shapes=((2, 5),)), MatchState.MATCH),  # same numel
    (make_call(), make_call(rank=1, op="broadcast", reduce_op="", peer=0),
     MatchState.OP_MISMATCH),
    (make_call(), make_call(rank=1, shapes=((11,),)), MatchState.SIZE_MISMATCH),
    (make_call(), make_call(rank=1, dtype="float64"), MatchState.DTYPE_MISMATCH),
    (make_call(), make_call(rank=1, reduce_op="max"), MatchState.REDUCE_OP_MISMATCH),
    (make_call(op="broadcast", reduce_op="", peer=0),
     make_call(rank=1, op="broadcast", reduce_op="", peer=1), MatchState.ROOT_MISMATCH),
    (make_call(), make_call(rank=1, reduce_op="max", shapes=((3,),), callsite="b.py:9"),
     MatchState.CALL_MISMATCH),
    (make_call(op="barrier", shapes=(), dtype=""),
     make_call(rank=1, op="barrier", shapes=(), dtype=""), MatchState.MATCH),
    (make_call(op="all_gather", out_shapes=((10,), (10,))),
     make_call(rank=1, op="all_gather", shapes=((12,),), out_shapes=((10,), (10,))),
     MatchState.SIZE_MISMATCH),
    (make_call(op="all_to_all_single", shapes=((4,),)),
     make_call(rank=1, op="all_to_all_single", shapes=((6,),)), MatchState.MATCH),
])
def test_compare(a, b, state):
    assert compare(a, b) == state


def test_majority_blames_the_odd_rank():
    calls = {r: make_call(rank=r) for r in range(4)}
    calls[2] = make_call(rank=2, shapes=((11,),))
    assert blame(calls) == ((2,), (0, 1, 3))


def test_tie_blames_everyone():
    calls = {0: make_call(), 1: make_call(rank=1, dtype="float64")}
    assert blame(calls) == ((0, 1), ())


def test_first_divergence_is_found_after_matching_prefix():
    seqs = {r: [make_call(rank=r, seq=s) for s in range(5)] for r in range(3)}
    seqs[1][3] = make_call(rank=1, seq=3, op="barrier", shapes=(), dtype="", reduce_op="")
    seqs[1][4] = make_call(rank=1, seq=4, shapes=((1,),))
    div = find_divergence(seqs, "0")
    assert div is not None and div.seq == 3 and div.culprits == (1,)
    assert div.state == MatchState.OP_MISMATCH


def test_no_divergence_when_one_rank_is_behind():
    seqs = {0: [make_call(seq=s) for s in range(5)], 1: [make_call(rank=1, seq=0)]}
    assert find_divergence(seqs, "0") is None


def test_rank_condition_reads_the_source(tmp_path: Path):
    src = tmp_path / "train.py"
    src.write_text(textwrap.dedent("""\
        import torch.distributed as dist
        def main(rank, args):
            if rank == 0:
                dist.barrier()
            if args.verbose:
                dist.all_reduce(x)
            if dist.get_rank() != 0:
                pass
            else:
                dist.broadcast(x, 0)
            if os.path.exists(ckpt):
                dist.broadcast_object_list(objs)
            msg = "rank"
            if msg == "rank":
                dist.barrier()
        """))
    assert rank_condition(f"{src}:4") == "`if rank == 0:`"
    assert rank_condition(f"{src}:6") is None
    assert rank_condition(f"{src}:10") == "else of `if dist.get_rank() != 0`"
    assert rank_condition(f"{src}:12") == "`if os.path.exists(ckpt):`"
    assert rank_condition(f"{src}:15") is None  # the word in a string does not count
    assert rank_condition("/no/such/file.py:3") is None
