"""Out-of-step alignment on hand-built call lists: the extra or missing call is found where
the ranks went out of step, not where the mismatch surfaced; differing call sites alone
make no finding."""

from __future__ import annotations

from dataclasses import replace

from ddpdoctor.analysis.align.out_of_step import first_gap, out_of_step
from ddpdoctor.analysis.causal.diagnose import diagnose
from ddpdoctor.analysis.engine import analyze
from ddpdoctor.analysis.model import Call, Severity
from ddpdoctor.trace import layout as L
from tests.cpu_time import own_cpu_seconds
from tests.unit.factory import job, rank, rec

BUCKET = int(L.RecordFlag.BUCKET)


def calls(r: int, specs: list[tuple[str, tuple[int, ...], str]], group: str = "0",
          open_last: bool = False) -> list[Call]:
    """Calls of rank ``r`` from (op, shape, site) triples, seq 0 on."""
    out = []
    for i, (op, shape, site) in enumerate(specs):
        last = open_last and i == len(specs) - 1
        out.append(replace(rec(i, op, t=i, shape=shape, site=site,
                               dur=None if last else 0.001), rank=r, group=group))
    return out


LOSS = ("all_reduce", (1,), "train.py:30")  # every step's loss, logged
GRAD = ("all_reduce", (18,), "train.py:31")  # every step's gradient
EXTRA = ("all_reduce", (1,), "train.py:40")  # under `if rank == 0:`, like LOSS in op and shape


def test_first_gap_finds_an_extra_key_whose_neighbours_match() -> None:
    ref = ["a", "b", "a", "b", "a", "b"]
    other = ["x", "a", "b", "a", "b", "a"]
    gap = first_gap(ref, other)
    assert gap is not None and gap.in_other and gap.j == 0


def test_first_gap_says_nothing_when_position_explains_as_much() -> None:
    assert first_gap(["a@1", "a@1", "a@1"], ["a@2", "a@2", "a@2"]) is None
    assert first_gap(["a", "b"], ["a", "b"]) is None


def test_extra_call_matching_the_next_calls_signature_is_found_where_it_was_made() -> None:
    steps = [LOSS, GRAD] * 3
    r0 = calls(0, steps[:4] + [EXTRA] + steps[4:], open_last=True)
    r1 = calls(1, steps + [("barrier", (), "train.py:50")], open_last=True)
    oos = out_of_step({0: r0, 1: r1}, "0", until_seq=5,
                      condition=lambda site: "`if rank == 0:`" if site.endswith(":40") else None)
    assert oos is not None
    assert oos.culprits == (0,) and oos.extra
    assert oos.call.callsite == "train.py:40" and oos.seqs == {0: 4}
    assert not oos.probable


def test_extra_call_with_only_call_sites_as_evidence_is_probable() -> None:
    r0 = calls(0, [LOSS, LOSS, EXTRA, LOSS, LOSS], open_last=True)
    r1 = calls(1, [LOSS, LOSS, LOSS, LOSS])
    oos = out_of_step({0: r0, 1: r1}, "0")
    assert oos is not None and oos.culprits == (0,) and oos.extra and oos.probable
    assert oos.seqs == {0: 2}


def test_missing_call_blames_the_rank_that_skipped_a_regular_call() -> None:
    steps = [LOSS, GRAD, ("all_reduce", (3,), "train.py:33")] * 3
    r0 = calls(0, steps, open_last=True)
    skipped = steps[:4] + steps[5:]  # rank 1 skipped step 1's gradient
    r1 = calls(1, skipped)
    oos = out_of_step({0: r0, 1: r1}, "0", until_seq=4)
    assert oos is not None
    assert oos.culprits == (1,) and not oos.extra and oos.missed_by == (1,)
    assert oos.call.callsite == "train.py:31" and oos.seqs == {1: 4}


def test_majority_of_three_blames_the_odd_rank() -> None:
    steps = [LOSS, GRAD] * 3
    odd = calls(2, steps[:2] + [EXTRA] + steps[2:])
    runs = {0: calls(0, steps), 1: calls(1, steps), 2: odd}
    oos = out_of_step(runs, "0")
    assert oos is not None and oos.culprits == (2,) and oos.extra


def test_legitimately_different_call_sites_make_no_finding() -> None:
    # rank 0 reduces its loss in one branch, the others in another, every step
    a = ("all_reduce", (1,), "train.py:20")
    b = ("all_reduce", (1,), "train.py:22")
    assert out_of_step({0: calls(0, [a] * 6), 1: calls(1, [b] * 6)}, "0") is None
    assert out_of_step({0: calls(0, [a] * 6), 1: calls(1, [b] * 5)}, "0") is None


def test_healthy_job_with_differing_call_sites_gets_no_finding() -> None:
    r0 = rank(0, [rec(i, t=i, site="train.py:20") for i in range(6)], L.RankState.EXITED)
    r1 = rank(1, [rec(i, t=i, site="train.py:22") for i in range(6)], L.RankState.EXITED)
    found = analyze(job([r0, r1], outcome="completed"), [])
    assert [f for f in found if f.severity != Severity.INFO] == []


def test_three_groups_interleaved_are_aligned_each_on_its_own() -> None:
    ga = [("all_reduce", (1,), "train.py:30")] * 4
    gb = [("all_gather", (2,), "train.py:31")] * 4
    gc = [("broadcast", (3,), "train.py:32")] * 4
    by_group = {
        "0": {0: calls(0, ga, "0"), 1: calls(1, ga, "0")},
        "1": {0: calls(0, gb[:2] + [("all_gather", (2,), "train.py:44")] + gb[2:], "1"),
              1: calls(1, gb, "1")},
        "2": {0: calls(0, gc, "2"), 1: calls(1, gc, "2")},
    }
    assert out_of_step(by_group["0"], "0") is None
    assert out_of_step(by_group["2"], "2") is None
    oos = out_of_step(by_group["1"], "1")
    assert oos is not None and oos.group == "1" and oos.culprits == (0,)
    assert oos.call.callsite == "train.py:44" and oos.seqs == {0: 2}


def test_thousand_ranks_one_extra_call_is_fast() -> None:
    steps = [LOSS, GRAD] * 50
    by_rank = {r: calls(r, steps) for r in range(1000)}
    by_rank[637] = calls(637, steps[:61] + [EXTRA] + steps[61:])
    with own_cpu_seconds() as took:
        oos = out_of_step(by_rank, "0")
    assert oos is not None and oos.culprits == (637,) and oos.seqs == {637: 61}
    assert took[0] < 2.0, took  # generous: well under a second of CPU


def test_collective_mismatch_points_at_the_extra_call_not_where_it_surfaced(tmp_path) -> None:
    src = tmp_path / "train.py"
    lines = ["pass"] * 60
    lines[28] = "for step in range(3):"
    lines[29] = "    dist.all_reduce(loss)"
    lines[30] = "    dist.all_reduce(grad)"
    lines[38] = "if rank == 0:"
    lines[39] = "    dist.all_reduce(val_loss)"
    src.write_text("\n".join(lines) + "\n")
    site = str(src)
    loss, grad, extra = ((1,), f"{site}:30"), ((18,), f"{site}:31"), ((1,), f"{site}:40")
    seq0 = [loss, grad, loss, grad, extra, loss, grad]
    seq1 = [loss, grad, loss, grad, loss, grad, loss]
    r0 = rank(0, [rec(i, t=i, shape=s, site=w, dur=None if i == 6 else 0.001)
                  for i, (s, w) in enumerate(seq0)])
    r1 = rank(1, [rec(i, t=i, shape=s, site=w, dur=None if i == 6 else 0.001)
                  for i, (s, w) in enumerate(seq1)])
    found = diagnose(job([r0, r1])).findings
    first = [f for f in found if f.severity == Severity.ERROR][0]
    assert first.kind == "collective_mismatch" and first.ranks == (0,)
    step = first.evidence["out_of_step"]
    assert step["callsite"] == f"{site}:40" and step["seq"] == 4 and step["ranks"] == [0]
    assert step["condition"] == "`if rank == 0:`" and not step["probable"]
    assert "train.py:40" in first.summary and "out of step" in first.summary


def test_conditional_call_that_met_another_line_is_where_the_ranks_went_out_of_step() -> None:
    # rank 0's evaluation forward (line 46, under `if rank == 0:`) broadcasts the buffers
    # where rank 1's training forward (line 40) does; rank 0's next forward skips its own
    bcast, grad = ("broadcast", (16,), "train.py:40"), ("all_reduce", (18,), "train.py:41")
    evaluate = ("broadcast", (16,), "train.py:46")
    r0 = calls(0, [bcast, grad, evaluate, grad, bcast, grad, evaluate], open_last=True)
    r1 = calls(1, [bcast, grad, bcast, grad, bcast, grad])
    cond = {"train.py:46": "`if rank == 0:`"}.get
    oos = out_of_step({0: r0, 1: r1}, "0", until_seq=6, condition=cond)
    assert oos is not None and oos.culprits == (0,) and oos.extra
    assert oos.call.callsite == "train.py:46" and oos.seqs == {0: 2}
    assert out_of_step({0: r0, 1: r1}, "0", until_seq=6) is None  # no branch: nothing said
