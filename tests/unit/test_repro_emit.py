"""The repro script from replay plans (no job launched): loops, branches, rank expressions."""

from __future__ import annotations

from pathlib import Path

from ddpdoctor.repro.emit import script_text
from ddpdoctor.repro.facts import Ending, RankPlan, ReplayJob
from ddpdoctor.repro.steps import Step

BUCKET = Step("all_reduce", "0", "avg", ((18,),), (), ("float32",), bucket=0,
              site="train.py:41", source="loss.backward()")
METRIC = Step("all_reduce", "0", "sum", ((1,),), (), ("float32",), site="train.py:48",
              source="dist.all_reduce(val_loss)", ranked=True)
BARRIER = Step("barrier", "0", site="train.py:52", source="dist.barrier()")


def job(plans: list[RankPlan], groups=()) -> ReplayJob:
    return ReplayJob(Path("/runs/x"), len(plans), ("python", "train.py"), "now", "hung",
                     tuple(groups), tuple(plans), "collective_mismatch (error, rank 0, seq 4)",
                     "ddpdoctor run")


def test_a_hang_after_ten_thousand_steps_is_a_loop_and_a_branch_per_rank():
    plans = [RankPlan(0, (BUCKET,) * 10_000 + (METRIC,), Ending.HANGS),
             RankPlan(1, (BUCKET,) * 10_000 + (BARRIER,), Ending.HANGS)]
    text = script_text(job(plans))
    compile(text, "repro.py", "exec")
    assert text.count("\n") < 100
    assert "for step in range(10000):" in text
    body = text[text.index("def main"):]
    assert body.index("if who == 0:") < body.index("at_48(dist.all_reduce, z(1))") < \
        body.index("else:  # rank 1") < body.index("at_52(dist.barrier)")
    assert "DDP bucket 0" in text and "train.py:48  dist.all_reduce(val_loss)" in text
    assert "ddpdoctor" not in body and "import train" not in text


def test_a_crash_is_raised_where_the_rank_died():
    plans = [RankPlan(0, (BUCKET,) * 3, Ending.HANGS),
             RankPlan(1, (BUCKET,) * 2, Ending.RAISES, "ValueError: corrupt record 7")]
    text = script_text(job(plans))
    compile(text, "repro.py", "exec")
    assert "raise RuntimeError('ValueError: corrupt record 7')" in text


def test_ring_peers_are_written_as_the_rank_shifted():
    world = 8
    plans = [RankPlan(r, (Step("send", "0", in_shapes=((3,),), dtypes=("float32",),
                               peer=(r + 1) % world, p2p=True, site="pipe.py:9"),
                          Step("recv", "0", in_shapes=((3,),), dtypes=("float32",),
                               peer=(r - 1) % world, p2p=True, site="pipe.py:10")),
                      Ending.RETURNS) for r in range(world)]
    text = script_text(job(plans))
    compile(text, "repro.py", "exec")
    assert "dst=(rank + 1) % 8" in text and "src=(rank - 1) % 8" in text
    assert "if who" not in text  # every rank shares both lines


def test_groups_are_created_in_order_and_each_rank_uses_its_own():
    groups = [("1", (0, 2)), ("2", (1, 3))]
    plans = [RankPlan(r, (Step("all_reduce", "1" if r % 2 == 0 else "2", "sum", ((4,),), (),
                               ("float32",), site="t.py:5"),), Ending.RETURNS)
             for r in range(4)]
    text = script_text(job(plans, groups))
    compile(text, "repro.py", "exec")
    assert text.index("g1 = dist.new_group([0, 2])") < text.index("g2 = dist.new_group([1, 3])")
    assert "own_group1 = {0: g1, 1: g2, 2: g1, 3: g2}[rank]" in text


def test_the_header_says_how_to_replay_with_a_short_hang_timeout():
    from ddpdoctor.repro.facts import replay_hang_timeout
    plans = [RankPlan(0, (METRIC,), Ending.HANGS), RankPlan(1, (BARRIER,), Ending.HANGS)]
    text = script_text(job(plans))
    assert "Replay: ddpdoctor run --hang-timeout 5 --nproc-per-node 2 THIS_FILE\n" in text
    assert replay_hang_timeout(60.0) == 5.0 and replay_hang_timeout(2.5) == 2.5
    assert replay_hang_timeout(None) == 5.0


def test_ddp_construction_check_is_replayed_with_each_ranks_parameter_shapes():
    def check(shapes):
        return Step("_verify_params_across_processes", "0", in_shapes=shapes,
                    dtypes=("float32",) * len(shapes), site="train.py:37",
                    source="ddp = DDP(model)")
    full, frozen = ((16, 8), (16,), (2, 16), (2,)), ((16,), (2, 16), (2,))
    plans = [RankPlan(0, (check(full),), Ending.CALL_FAILS, "RuntimeError: DDP expects"),
             RankPlan(1, (check(frozen),), Ending.CALL_FAILS, "RuntimeError: DDP expects")]
    text = script_text(job(plans))
    compile(text, "repro.py", "exec")
    body = text[text.index("def main"):]
    assert body.index("if who == 0:") < body.index(
        "dist._verify_params_across_processes, dist.group.WORLD, [z(16, 8), z(16), z(2, 16), "
        "z(2)])") < body.index("else:  # rank 1") < body.index(
        "dist._verify_params_across_processes, dist.group.WORLD, [z(16), z(2, 16), z(2)])")


def test_a_call_too_long_for_a_line_is_broken_after_commas_not_cut():
    shapes = tuple((i + 1, 3) for i in range(60))
    step = Step("_verify_params_across_processes", "0", in_shapes=shapes, site="train.py:9")
    text = script_text(job([RankPlan(0, (step,), Ending.RETURNS),
                            RankPlan(1, (step,), Ending.RETURNS)]))
    compile(text, "repro.py", "exec")
    assert all(len(line) <= 100 for line in text.splitlines() if "z(" in line)
    assert text.count("z(") == 60 + 2  # every shape, and the two helpers' own lines
