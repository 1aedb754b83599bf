"""A recorded DDP replayed through a real DDP of stand-in parameters (steps in, steps out)."""

from __future__ import annotations

from pathlib import Path

from ddpdoctor.repro.ddp_replay import (CONSTRUCTION_CHECK, DDP_BACKWARD, DDP_BUILD,
                                        rank_ddp_steps)
from ddpdoctor.repro.emit import script_text
from ddpdoctor.repro.facts import (OPTIMIZER_STEP, Ending, RankPlan, ReplayJob,
                                   plans_with_real_ddp)
from ddpdoctor.repro.steps import Step

CHECK = Step(CONSTRUCTION_CHECK, "0", in_shapes=((2, 8), (2,)), dtypes=("float32",) * 2,
             site="train.py:34", source="model = DDP(nn.Linear(8, 2))")
SYNC = Step("broadcast", "0", in_shapes=((18,),), dtypes=("float32",), peer=0,
            site="train.py:34", framework_site="torch/distributed/utils.py:326")
BUCKET = Step("all_reduce", "0", "avg", ((18,),), (), ("float32",), bucket=0,
              site="train.py:39", source="loss.backward()")
STEP = Step(OPTIMIZER_STEP, "")
METRIC = Step("all_reduce", "0", "sum", ((1,),), (), ("float32",), site="train.py:48")


def test_the_construction_and_each_backward_pass_become_one_step_each():
    steps = rank_ddp_steps((CHECK, SYNC, BUCKET, STEP, BUCKET, STEP, METRIC))
    assert steps is not None
    assert [s.op for s in steps] == [DDP_BUILD, DDP_BACKWARD, OPTIMIZER_STEP, DDP_BACKWARD,
                                     OPTIMIZER_STEP, "all_reduce"]
    assert steps[0].in_shapes == ((2, 8), (2,)) and steps[1].in_shapes == ((18,),)


def test_buckets_that_do_not_fit_the_ddp_built_stay_plain_all_reduces():
    other_hook = Step("all_reduce", "0", "sum", ((18,),), (), ("float16",), bucket=0)
    assert rank_ddp_steps((CHECK, SYNC, other_hook, STEP)) is None
    assert rank_ddp_steps((BUCKET, STEP)) is None  # no DDP built on record
    half = Step("all_reduce", "0", "avg", ((9,),), (), ("float32",), bucket=0)
    assert rank_ddp_steps((CHECK, SYNC, half, STEP)) is None  # a complete pass of 9 of 18
    two = (half, Step("all_reduce", "0", "avg", ((9,),), (), ("float32",), bucket=1))
    assert rank_ddp_steps((CHECK, SYNC, *two, STEP)) is None  # a layout of two buckets
    plans = (RankPlan(0, (CHECK, SYNC, BUCKET, STEP), Ending.RETURNS),
             RankPlan(1, (BUCKET, STEP), Ending.RETURNS))
    assert plans_with_real_ddp(plans) == plans  # one rank that cannot: no rank does


def test_the_script_builds_a_ddp_of_the_shapes_and_runs_backward_through_it():
    plans = plans_with_real_ddp((RankPlan(0, (CHECK, SYNC, BUCKET, STEP, BUCKET), Ending.HANGS),
                           RankPlan(1, (CHECK, SYNC, BUCKET, STEP), Ending.RETURNS)))
    text = script_text(ReplayJob(Path("/runs/x"), 2, ("python", "train.py"), "now", "hung",
                                 (), plans, "uneven_batches (error, rank 1, seq 4)",
                                 "ddpdoctor run"))
    compile(text, "repro.py", "exec")
    assert "from torch.nn.parallel import DistributedDataParallel as DDP" in text
    assert "ddp = at_34(DDP, Params((2, 8), (2,)))" in text
    body = text[text.index("def main"):]
    assert body.count("at_39(torch.autograd.backward, ddp())") == 2  # the loop's, rank 0's
    assert "dist.all_reduce(z(18)" not in text and "dist.broadcast" not in text


def test_a_rank_that_destroys_its_group_releases_its_ddp_first():
    plans = plans_with_real_ddp((RankPlan(0, (CHECK, SYNC, BUCKET, STEP), Ending.RETURNS,
                                    destroys=True),
                           RankPlan(1, (CHECK, SYNC, BUCKET, STEP), Ending.RETURNS,
                                    destroys=True)))
    text = script_text(ReplayJob(Path("/runs/x"), 2, ("python", "train.py"), "now", "completed",
                                 (), plans, "", "ddpdoctor run"))
    compile(text, "repro.py", "exec")
    assert text.index("del ddp") < text.index("dist.destroy_process_group()")
