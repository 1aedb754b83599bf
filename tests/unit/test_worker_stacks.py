"""A rank the others wait on that waits on its own DataLoader worker: the worker's stack,
taken beside the rank's, names the line the worker is held at."""

from __future__ import annotations

from ddpdoctor.analysis.engine import analyze
from ddpdoctor.analysis.model import Severity
from ddpdoctor.trace import layout as L
from tests.unit.factory import frame, job, rank, rec, steps

LOADER = "/usr/lib/python3/site-packages/torch/utils/data/dataloader.py"


def _job(children):
    r0 = rank(0, steps(3) + [rec(3, t=10, dur=None, site="train.py:57")])
    r1 = rank(1, steps(3), state=L.RankState.COMPUTING,
              stack=[frame(LOADER, 1300, "_next_data"), frame("train.py", 54)])
    r1.cpu_busy = False
    r1.children = children
    return job([r0, r1])


def test_the_worker_a_loading_rank_waits_on_is_named_at_its_line():
    held = [frame("/usr/lib/python3.11/threading.py", 100, "acquire"),
            frame("/data/train.py", 24, "CachedDecode.__getitem__")]
    f = next(x for x in analyze(_job([(4242, held)])) if x.severity == Severity.ERROR)
    assert f.ranks == (1,)
    assert f.evidence["worker"]["pid"] == 4242 and f.evidence["worker"]["line"] == 24
    assert "child process 4242" in f.summary and "train.py:24" in f.summary


def test_without_its_workers_stacks_nothing_is_said_of_them():
    f = next(x for x in analyze(_job([])) if x.severity == Severity.ERROR)
    assert f.ranks == (1,) and "worker" not in f.evidence
