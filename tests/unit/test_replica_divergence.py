"""replica_divergence from typed facts: prints in, findings out (no job), and the prints and
the check schedule themselves on real tensors."""

from __future__ import annotations

import torch

from ddpdoctor.analysis.detectors.drift.finding import divergence_findings
from ddpdoctor.analysis.detectors.drift.facts import (Check, HyperRow, ReplicaFacts, ReplicaSet,
                                              SchedulerSteps, Write, check_from_event)
from ddpdoctor.runtime.replica_prints import LOG_BUDGET, CheckSchedule, every_for, fingerprints

NAMES = ("body.weight", "body.bias", "head.weight", "head.bias")
SAME = ((11, 1.0), (12, 2.0), (13, 3.0), (14, 4.0))
SGD = (HyperRow("SGD", 0, (("lr", 0.1), ("momentum", 0.0))),)


def replica_set(rank: int, world: int = 2, broadcast_buffers: bool = True,
                requires_grad: tuple[bool, ...] = (True,) * 4) -> ReplicaSet:
    return ReplicaSet(rank, 0, tuple(range(world)), NAMES, ("bn.running_mean",),
                      broadcast_buffers, "/nonexistent/train.py:30", requires_grad)


def check(rank: int, step: int, params=SAME, grads=SAME, **kw) -> Check:
    fields = dict(versions=(step,) * 4, hyper=SGD, group_of=(0, 0, 0, 0))
    fields.update(kw)
    return Check(rank, 0, step, params, grads, **fields)


def facts(checks: list[Check], world: int = 2, writes: list[Write] | None = None,
          **set_kw) -> ReplicaFacts:
    f = ReplicaFacts(sets={r: [replica_set(r, world, **set_kw)] for r in range(world)},
                     writes=writes or [])
    for c in checks:
        f.checks.setdefault(c.rank, []).append(c)
    return f


def drifted(params=SAME, index: int = 2, bits: int = 99, norm: float = 3.3):
    out = list(params)
    out[index] = (bits, norm)
    return tuple(out)


def test_identical_replicas_give_no_finding():
    assert divergence_findings(facts([check(r, s) for r in (0, 1) for s in (1, 2, 4)])) == []


def test_first_divergent_check_names_the_parameter_step_and_majority():
    checks = [check(r, s) for r in (0, 1, 2) for s in (1, 2)]
    checks += [check(0, 4), check(1, 4, params=drifted()), check(2, 4)]
    [f] = divergence_findings(facts(checks, world=3))
    assert f.kind == "replica_divergence" and f.severity.value == "error"
    assert f.ranks == (1,)  # the majority tells
    ev = f.evidence
    assert ev["step"] == 4 and ev["previous_check"] == 2 and ev["parameters"] == ["head.weight"]
    assert ev["buffers"] == [] and abs(ev["relative_difference"]["head.weight"] - 0.1) < 1e-9
    assert "after step 4" in f.summary and "head.weight" in f.summary


def test_two_ranks_without_a_majority_blame_both():
    [f] = divergence_findings(facts([check(0, 1), check(1, 1, params=drifted())]))
    assert f.ranks == (0, 1) and f.evidence["majority"] is False


def test_accumulated_twice_is_the_likely_cause_of_unaveraged_gradients():
    checks = [check(0, 1, twice=(0,)), check(1, 1, params=drifted(index=0),
                                            grads=drifted(index=0), twice=(0,))]
    [f] = divergence_findings(facts(checks))
    assert f.evidence["cause"] == "accumulated_twice"
    assert "use_reentrant=False" in f.fix
    kinds = [c["kind"] for c in f.evidence["causes"]]
    assert kinds == ["accumulated_twice", "gradient_changed"]


def test_a_load_on_one_rank_is_named_with_its_line():
    writes = [Write(1, 0, "load_state_dict", ("head.weight", "head.bias"), 0,
                    "/nonexistent/train.py:42")]
    checks = [check(0, 1), check(1, 1, params=drifted(), versions=(1, 1, 2, 2))]
    [f] = divergence_findings(facts(checks, writes=writes))
    assert f.evidence["cause"] == "write"
    cause = f.evidence["causes"][0]
    assert cause["ranks"] == [1] and cause["site"].endswith("train.py:42")
    assert "rank 1 called load_state_dict" in f.detail and "train.py:42" in f.detail
    assert "written_in_place" in [c["kind"] for c in f.evidence["causes"]]


def test_a_load_on_every_rank_is_not_a_cause():
    writes = [Write(r, 0, "load_state_dict", ("head.weight",), 0, "") for r in (0, 1)]
    [f] = divergence_findings(facts([check(0, 1), check(1, 1, params=drifted())],
                                    writes=writes))
    assert f.evidence["cause"] != "write"


def test_scheduler_and_settings_that_differ():
    lr = (HyperRow("SGD", 0, (("lr", 0.05), ("momentum", 0.0))),)
    checks = [check(0, 1), check(1, 1),
              check(0, 4, hyper=lr, schedulers=(SchedulerSteps("StepLR", 1, "/x/t.py:9"),)),
              check(1, 4, params=drifted(), schedulers=(SchedulerSteps("StepLR", 0),))]
    [f] = divergence_findings(facts(checks))
    kinds = [c["kind"] for c in f.evidence["causes"]]
    assert kinds == ["scheduler", "hyperparameters"]
    assert "lr 0.05 on rank 0, 0.1 on rank 1" in f.detail
    assert "stepped on rank 0 only" in f.summary


def test_requires_grad_flip_and_missing_gradient():
    no_grad = drifted(index=0, bits=0)
    no_grad = (None,) + no_grad[1:]
    checks = [check(0, 8, flipped=(0,), grads=no_grad), check(1, 8, params=drifted(index=0))]
    [f] = divergence_findings(facts(checks))
    kinds = [c["kind"] for c in f.evidence["causes"]]
    assert kinds[:2] == ["requires_grad", "no_gradient"]
    assert f.evidence["causes"][1]["ranks"] == [0]


def test_buffers_under_broadcast_buffers_false_are_information():
    bufs = ((5, 1.0),)
    checks = [check(0, 1, buffers=bufs), check(1, 1, buffers=((6, 1.2),))]
    [f] = divergence_findings(facts(checks, broadcast_buffers=False))
    assert f.severity.value == "info" and f.evidence["buffers"] == ["bn.running_mean"]
    assert f.evidence["parameters"] == []


def test_unknown_cause_and_ranks_that_stopped_early():
    checks = [check(0, 1), check(1, 1), check(0, 2), check(1, 2, params=drifted()),
              check(0, 4)]  # rank 1 never reached step 4
    [f] = divergence_findings(facts(checks))
    assert f.evidence["step"] == 2 and f.evidence["cause"] == "unknown"


def test_malformed_events_are_skipped():
    assert check_from_event(0, {"ddp": 0, "step": "x", "params": []}) is None
    c = check_from_event(0, {"ddp": 0, "step": 3, "params": [[1, 2.0], "bad", [1]],
                             "hyper": [{"optimizer": "SGD", "group": 0, "betas": [0.9, 0.99]}]})
    assert c is not None and c.params == ((1, 2.0), None, None)
    assert c.hyper[0].settings == (("betas", (0.9, 0.99)),)


def test_prints_see_any_bit_and_agree_on_identical_tensors():
    a = torch.randn(5, 3)
    b = a.clone()
    flipped = a.clone()
    flipped.view(torch.int32)[2, 1] ^= 1  # one bit of one element
    odd = torch.arange(7, dtype=torch.int16)  # 14 bytes: a tail below one word
    pa, pb, pf, po, none = fingerprints([a, b, flipped, odd, None])
    assert pa == pb and pa[0] != pf[0] and none is None
    raw = odd.view(torch.uint8)
    assert po[1] is None and po[0] == raw[:8].view(torch.int64).item() + int(raw[8:].sum())
    tail = odd.clone()
    tail[6] += 1  # in the last 6 bytes, below a whole word
    assert fingerprints([tail])[0][0] != po[0]
    assert abs(pa[1] - a.norm().item()) < 1e-5
    unaligned = torch.randn(9)[1:]  # 4-byte offset in its storage
    assert fingerprints([unaligned])[0][0] == fingerprints([unaligned.clone()])[0][0]


def test_schedule_is_dense_early_and_shared_by_different_intervals():
    s = CheckSchedule()
    assert [k for k in range(1, 40) if s.is_check(k)] == [1, 2, 4, 8, 16, 32]
    for k in range(2, 17):
        s.note_step(k, 0.010)
    s.note_check(4, 0.002)
    s.note_check(16, 0.003)  # 20% of a step: 0.5% a step at 40 -> 64
    assert s.every == 64
    assert every_for(1e-6, 1.0) == 16 and every_for(10.0, 0.001) == 4096
    a, b = CheckSchedule(32), CheckSchedule(128)
    assert {k for k in range(1, 1000) if a.is_check(k) and b.is_check(k)} >= {128, 256, 384}


def test_interval_doubles_past_each_log_budget():
    s = CheckSchedule(16)
    s.note_logged(LOG_BUDGET // 2)
    assert s.every == 16
    s.note_logged(LOG_BUDGET)  # past the first budget
    assert s.every == 32
    s.note_logged(LOG_BUDGET // 2)  # the budget doubled too
    assert s.every == 32


def test_a_clip_threshold_that_differs_names_its_line():
    checks = [check(0, 1, clips=(("/nonexistent/train.py:37", 0.05),)),
              check(1, 1, params=drifted(), grads=drifted(),
                    clips=(("/nonexistent/train.py:37", 0.06),))]
    [f] = divergence_findings(facts(checks))
    [cause] = f.evidence["causes"]
    assert cause["kind"] == "gradient_changed" and cause["site"].endswith("train.py:37")
    assert "max_norm 0.05 on rank 0, 0.06 on rank 1" in f.detail


def test_ranks_that_ran_different_numbers_of_synced_backwards_are_the_likely_cause():
    """A synced micro-batch skipped on one rank: DDP averages one step's gradients with
    another's, the gradients differ at the step, and the count of synced backward passes by
    the check says why (not a per-rank clipping)."""
    checks = [check(r, 1, t_ns=100) for r in (0, 1)]
    checks += [check(0, 2, t_ns=200),
               check(1, 2, params=drifted(), grads=drifted(), t_ns=200)]
    f = facts(checks)
    f.passes = {0: [10, 110, 150], 1: [10, 110]}
    [found] = divergence_findings(f)
    assert found.evidence["cause"] == "unsynced"
    assert "rank 0: 3, rank 1: 2" in found.detail and "skip it on every rank" in found.fix
    f.passes = {0: [10, 110, 150], 1: [10, 110, 150]}
    [same] = divergence_findings(f)
    assert same.evidence["cause"] == "gradient_changed"  # the counts agree: not this cause


def test_a_setting_changed_on_some_ranks_only_is_named_with_its_line():
    """The line that set the ranks apart, not the scheduler line both ranks ran last."""
    both, apart = "/nonexistent/train.py:40", "/nonexistent/train.py:37"
    lr0 = (HyperRow("AdamW", 0, (("lr", 0.001),), (("lr", (apart, both)),)),)
    lr1 = (HyperRow("AdamW", 0, (("lr", 0.01),), (("lr", (both,)),)),)
    checks = [check(0, 8, hyper=lr0), check(1, 8, params=drifted(), hyper=lr1)]
    [f] = divergence_findings(facts(checks))
    cause = f.evidence["causes"][0]
    assert cause["kind"] == "hyperparameters" and cause["site"] == apart
    assert "changed at train.py:37 on rank 0 only" in f.detail
    assert f.summary.endswith("(train.py:37)")
    lr1 = (HyperRow("AdamW", 0, (("lr", 0.01),), (("lr", (apart, both)),)),)
    [g] = divergence_findings(facts([check(0, 8, hyper=lr0),
                                     check(1, 8, params=drifted(), hyper=lr1)]))
    assert "last changed at train.py:40" in g.detail  # every rank ran both lines


def test_checks_at_forwards_are_compared_apart_from_checks_after_steps():
    """A DDP no hooked optimizer steps is checked as its forwards start; a forward count is
    not a step count, so the two never meet."""
    checks = [check(0, 1, at="forward"), check(1, 1, at="forward"),
              check(0, 2, at="forward"), check(1, 2, params=drifted(), at="forward"),
              check(0, 2), check(1, 2)]  # step 2: identical, a different moment
    [f] = divergence_findings(facts(checks))
    assert f.evidence["checked_at"] == "forward" and f.evidence["step"] == 2
    assert "before DDP forward 2 (identical before DDP forward 1)" in f.summary
    assert divergence_findings(facts(checks[:2] + checks[4:])) == []


def test_a_rank_with_a_synced_backward_more_for_the_same_updates_skipped_a_step():
    checks = [check(r, 4, t_ns=100, params=drifted() if r == 2 else SAME) for r in range(3)]
    f = facts(checks, world=3)
    f.passes = {0: [1, 2, 3, 4], 1: [1, 2, 3, 4], 2: [1, 2, 3, 4, 5]}
    [found] = divergence_findings(f)
    assert found.evidence["cause"] == "skipped_step" and found.ranks == (2,)
    assert "rank 2 skipped an optimizer step the others took" in found.summary
    f.passes[2] = [1, 2, 3]  # a pass fewer: a synced backward skipped, not a step
    [fewer] = divergence_findings(f)
    assert fewer.evidence["cause"] == "unsynced"


def test_a_grad_scale_that_differs_is_named_with_its_update_line():
    site = "/nonexistent/train.py:49"
    checks = [check(0, 8, scalers=(("GradScaler", 8192.0, site),)),
              check(1, 8, params=drifted(), grads=drifted(),
                    scalers=(("GradScaler", 4096.0, site),))]
    [f] = divergence_findings(facts(checks))
    assert f.evidence["cause"] == "grad_scale"
    assert "scale is 8192 on rank 0, 4096 on rank 1" in f.detail
    assert f.summary.endswith("(train.py:49)")


def test_a_write_every_rank_made_is_a_cause_only_where_the_values_differ():
    site = "/nonexistent/train.py:54"
    same = [Write(r, 0, "torch.nn.init.zeros_", ("head.weight",), 0, site, ((7, 0.0),))
            for r in (0, 1)]
    checks = [check(0, 1), check(1, 1, params=drifted())]
    [f] = divergence_findings(facts(checks, writes=same))
    assert f.evidence["cause"] != "write"
    apart = [Write(r, 0, "torch.nn.init.normal_", ("head.weight",), 0, site, ((7 + r, 1.0),))
             for r in (0, 1)]
    [g] = divergence_findings(facts(checks, writes=apart))
    assert g.evidence["cause"] == "write" and "wrote different values" in g.detail


def test_the_first_step_taken_with_settings_apart_narrows_the_window():
    """Checks at 8 and 16 bracket the drift; the settings prints of every step say it began
    at step 9 (rank 0's print changed there, rank 1's did not)."""
    lr0 = (HyperRow("SGD", 0, (("lr", 0.05),), (("lr", ("/x/train.py:62",)),)),)
    checks = [check(0, 8, settings=((1, 11),)), check(1, 8, settings=((1, 11),)),
              check(0, 16, hyper=lr0, settings=((9, 22),)),
              check(1, 16, params=drifted())]
    [f] = divergence_findings(facts(checks))
    assert f.evidence["first_step"] == 9 and f.evidence["previous_check"] == 8
    assert "the optimizer settings differ from step 9 on" in f.summary
