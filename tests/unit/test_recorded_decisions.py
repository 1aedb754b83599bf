"""Blame from each rank's recorded control flow: where the paths parted, the decision behind
it, and who is named (majority, history, the branch that holds the call, else every side).
Typed facts in (trace factory: PATH records and flow meta events), findings out."""

from __future__ import annotations

import textwrap
from pathlib import Path

from ddpdoctor.analysis.engine import analyze
from ddpdoctor.analysis.model import Finding, Severity
from ddpdoctor.trace import layout as L
from tests.unit.factory import (flow_site, flow_values, frame, job, rec, rank, segment,
                                steps)

RESUME = """\
import os


def main(state_path, model, opt):
    if os.path.exists(state_path):
        start_step = int(open(state_path).read())
    else:
        start_step = 0
    for step in range(start_step, 10):
        loss = model(step)
        loss.backward()
        opt.step()
"""


def _source(tmp_path: Path, text: str, name: str = "train.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def _first_error(findings: list[Finding]) -> Finding:
    return next(f for f in findings if f.severity == Severity.ERROR)


def _resume_rank(r: int, src: str, resumed: bool, steps_run: int, blocked: bool,
                 world: int) -> object:
    """A rank of the resume job: its `if os.path.exists` went ``resumed``; it ran
    ``steps_run`` steps (one all_reduce each) and then waits in the next (``blocked``) or
    exited."""
    meta = [flow_site(0, src, 5, fall=6, jump=8, names=("state_path",)),
            flow_site(1, src, 9, op="FOR_ITER", fall=10, jump=9, names=("start_step",)),
            flow_values(0, 0 if resumed else 1, 0, state_path=f"'/ckpt/rank{r}.txt'"),
            flow_values(1, 0, 0, start_step="6" if resumed else "0")]
    way = "0.1.0" if resumed else "0.0.1"
    segs = [segment(0, -1, 0, f"{way},1.1.0")]
    segs += [segment(i, i - 1, i, "1.1.0", t=i) for i in range(1, steps_run)]
    last = "1.1.0" if blocked else "1.0.1"
    segs.append(segment(steps_run, steps_run - 1, steps_run if blocked else None, last,
                        t=steps_run))
    records = steps(steps_run, site=f"{src}:11") + segs
    if blocked:
        records.append(rec(steps_run, t=steps_run + 0.5, dur=None, site=f"{src}:11"))
    state = L.RankState.COMPUTING if blocked else L.RankState.EXITED
    return rank(r, records, state=state, meta=meta, world=world,
                returncode=None if blocked else 0)


def test_a_value_decided_once_names_the_branch_that_set_it_and_every_side(tmp_path):
    """Two ranks resumed at different steps (one's state file missing): the line where
    their collectives went apart is the loop; what decided it is the `if` that set the
    loop's start, and with one rank on each side no majority tells: both are named."""
    src = _source(tmp_path, RESUME)
    runs = [_resume_rank(0, src, True, 4, False, 2), _resume_rank(1, src, False, 6, True, 2)]
    f = _first_error(analyze(job(runs)))
    d = f.evidence["decision"]
    assert (d["line"], d["source"]) == (5, "if os.path.exists(state_path):")
    assert d["ranks"]["0"]["outcome"] == "true" and d["ranks"]["1"]["outcome"] == "false"
    assert d["ranks"]["1"]["values"]["start_step"] == "0"
    assert "start_step = 0` at train.py:8" in d["ranks"]["1"]["assigned"]
    assert d["parted_at"]["line"] == 9
    assert f.ranks == (0, 1) and f.evidence["no_majority"] is True
    assert "train.py:5" in f.summary and "train.py:5" in f.fix
    assert "split the data" not in f.fix


def test_the_rank_outside_the_majority_is_the_culprit(tmp_path):
    """Four ranks, rank 2's state file missing: three resumed at 6, one at 0."""
    src = _source(tmp_path, RESUME)
    runs = [_resume_rank(r, src, r != 2, 6 if r == 2 else 4, r == 2, 4) for r in range(4)]
    f = _first_error(analyze(job(runs, world=4)))
    assert f.ranks == (2,), f.summary
    assert f.evidence["why"]["rule"] == "majority"
    assert "no_majority" not in f.evidence


WRITER = """\
import torch.distributed as dist


def main(rank, model, writer):
    for step in range(3):
        model(step)
    if writer is not None:
        writer.close()
    return 0
"""


def test_an_extra_collective_in_a_method_names_the_rank_whose_branch_holds_it(tmp_path):
    """Rank 0 alone holds a writer whose close() ends in a barrier; rank 1 finished and
    exited.  The rank that finished is not the culprit: rank 0's branch holds the call."""
    src = _source(tmp_path, WRITER)
    helper = str(tmp_path / "writer.py")

    def flows(r: int, has_writer: bool) -> list:
        meta = [flow_site(0, src, 5, op="FOR_ITER", fall=6, jump=5),
                flow_site(1, src, 7, fall=8, jump=9, names=("writer",)),
                flow_values(1, 0 if has_writer else 1, 3,
                            writer="<SummaryWriter>" if has_writer else "None")]
        segs = [segment(0, -1, 0, "0.1.0"), segment(1, 0, 1, "0.1.0"), segment(2, 1, 2, "0.1.0"),
                segment(3, 2, 3 if has_writer else None,
                        "0.0.1,1.1.0" if has_writer else "0.0.1,1.0.1")]
        return meta, segs

    meta0, segs0 = flows(0, True)
    meta1, segs1 = flows(1, False)
    r0 = rank(0, steps(3, site=f"{src}:6") + segs0 +
              [rec(3, "barrier", t=4, dur=None, site=f"{helper}:12")], meta=meta0,
              stack=[frame(helper, 12, "close"), frame(src, 8)])
    r1 = rank(1, steps(3, site=f"{src}:6") + segs1, state=L.RankState.EXITED, meta=meta1,
              returncode=0)
    f = _first_error(analyze(job([r0, r1])))
    assert f.ranks == (0,), f.summary
    assert f.evidence["why"]["rule"] == "branch"
    assert f.evidence["decision"]["line"] == 7
    assert f.evidence["decision"]["ranks"]["1"]["values"] == {"writer": "None"}


STOP = """\
def main(model, should_stop):
    for step in range(100):
        model(step)
        if should_stop(step):
            break
    return 0
"""


def test_the_rank_that_left_its_own_habit_is_named(tmp_path):
    """Rank 1 broke out of the loop on its own stop check (false every earlier step); rank 0
    went on to the next step's collective."""
    src = _source(tmp_path, STOP)
    meta = [flow_site(0, src, 2, op="FOR_ITER", fall=3, jump=2),
            flow_site(1, src, 4, fall=5, jump=2)]

    def segs(breaks: bool) -> list:
        out = [segment(i, i - 1, i, "1.0.1,0.1.0", t=i) for i in range(1, 5)]
        last = "1.1.0" if breaks else "1.0.1,0.1.0"
        return [segment(0, -1, 0, "0.1.0")] + out + [segment(5, 4, None if breaks else 5, last,
                                                             t=5)]

    r0 = rank(0, steps(5, site=f"{src}:3") + segs(False) +
              [rec(5, t=6, dur=None, site=f"{src}:3")], meta=meta)
    r1 = rank(1, steps(5, site=f"{src}:3") + segs(True), state=L.RankState.EXITED,
              meta=meta, returncode=0)
    f = _first_error(analyze(job([r0, r1])))
    assert f.ranks == (1,), f.summary
    assert f.evidence["why"]["rule"] == "history"
    assert f.evidence["decision"]["ranks"]["1"]["outcome"] == "break"
    assert f.evidence["decision"]["ranks"]["0"]["outcome"] == "false"


def test_without_a_record_the_finding_is_the_source_rules_as_before(tmp_path):
    """No rank recorded its control flow (Python < 3.12): no decision evidence is made up."""
    src = _source(tmp_path, RESUME)
    r0 = rank(0, steps(4, site=f"{src}:11"), state=L.RankState.EXITED, returncode=0)
    r1 = rank(1, steps(6, site=f"{src}:11") + [rec(6, t=7, dur=None, site=f"{src}:11")])
    f = _first_error(analyze(job([r0, r1])))
    assert "decision" not in f.evidence and "no_majority" not in f.evidence
