"""The cause a finding states, on hand-built jobs: blame from evidence (a rank branch, a
decision on rank-local input, the loop a rank left), never from a coin toss, and a `Fix:`
line that follows that cause rather than the call a waiting rank happened to make."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from ddpdoctor.analysis.engine import analyze
from ddpdoctor.analysis.model import Finding, JobView, Severity
from ddpdoctor.trace import layout as L
from tests.fix_agreement import disagreement
from tests.unit.factory import job, rank, rec, steps

BUCKET = int(L.RecordFlag.BUCKET)
SCRIPT = """import contextlib, time
def main(model, opt, rank, loader, evaluate, batches):
    best, last, tokens = 1e9, time.monotonic(), 0
    for epoch in range(9):
        for x in loader:
            model(x).sum().backward()
            opt.step()
            if rank == 0:
                dist.all_reduce(metric)
            if time.monotonic() - last > 60:
                dist.barrier()
        val = evaluate(model)
        if val >= best:
            break
        best = val
    dist.barrier()
    for micro, x in enumerate(batches):
        tokens += x.numel()
        sync = tokens >= 4096
        ctx = contextlib.nullcontext() if sync else model.no_sync()
        with ctx:
            model(x).sum().backward()
        if micro % 8 == 7:
            dist.all_reduce(loss)
"""
BACKWARD, RANK0_METRIC, CLOCK_BARRIER, CLOSING_BARRIER = 6, 9, 11, 16
MICRO_BACKWARD, LOSS_LOG = 22, 24


def _site(tmp_path: Path, line: int) -> str:
    path = tmp_path / "train.py"
    if not path.exists():
        path.write_text(SCRIPT)
    return f"{path}:{line}"


def _first_error(j: JobView) -> Finding:
    found = analyze(j, [])
    errors = [f for f in found if f.severity == Severity.ERROR]
    assert errors, [f.summary for f in found]
    return errors[0]


def _agrees(f: Finding) -> None:
    d = asdict(f)
    d["severity"] = f.severity.value
    assert disagreement(d) is None, (disagreement(d), f.fix)


def _two_ranks(tmp_path: Path, last: dict[int, tuple[str, int, int]]) -> JobView:
    """Two ranks with 4 synced backward passes each, then per rank its last call (op, line,
    flags), still open."""
    site = _site(tmp_path, BACKWARD)
    runs = []
    for r in (0, 1):
        op, line, flags = last[r]
        runs.append(rank(r, [rec(i, t=i, site=site, flags=BUCKET, shape=(18,))
                             for i in range(4)] +
                         [rec(4, op, t=5, dur=None, site=_site(tmp_path, line), flags=flags,
                              shape=(18,) if flags else (1,))]))
    return job(runs)


def test_rank_branch_fix_is_about_the_condition_not_the_peers_backward(tmp_path) -> None:
    f = _first_error(_two_ranks(tmp_path, {0: ("all_reduce", RANK0_METRIC, 0),
                                           1: ("all_reduce", BACKWARD, BUCKET)}))
    assert f.ranks == (0,)
    assert "`if rank == 0:`" in f.fix and "backward" not in f.fix
    _agrees(f)


def test_leaving_the_loop_then_waiting_in_a_barrier_names_the_break(tmp_path) -> None:
    f = _first_error(_two_ranks(tmp_path, {0: ("all_reduce", BACKWARD, BUCKET),
                                           1: ("barrier", CLOSING_BARRIER, 0)}))
    assert f.ranks == (1,)  # 1 against 1: the rank that took the `break`, from the source
    decision = f.evidence["why"]["decision"]
    assert decision["statement"] == "break" and decision["reads"] == "metric"
    assert "`break`" in f.summary and "validation score" in f.summary
    assert f.fix.startswith("Decide together") and "validation score" in f.fix
    _agrees(f)


def test_a_checkpoint_on_the_ranks_own_clock_blames_the_rank_that_took_it(tmp_path) -> None:
    f = _first_error(_two_ranks(tmp_path, {0: ("all_reduce", BACKWARD, BUCKET),
                                           1: ("barrier", CLOCK_BARRIER, 0)}))
    assert f.ranks == (1,)
    assert f.evidence["why"]["decision"]["reads"] == "clock"
    assert "its own clock" in f.summary and "clock" in f.fix
    _agrees(f)


def test_leaving_no_sync_on_its_own_token_count_blames_that_rank(tmp_path) -> None:
    f = _first_error(_two_ranks(tmp_path, {0: ("all_reduce", LOSS_LOG, 0),
                                           1: ("all_reduce", MICRO_BACKWARD, BUCKET)}))
    assert f.ranks == (1,)  # not the peer's regular loss all_reduce
    decision = f.evidence["why"]["decision"]
    assert decision["statement"] == "no_sync" and "tokens >= 4096" in decision["condition"]
    assert "no_sync()" in f.fix
    _agrees(f)


def test_no_evidence_and_no_majority_names_every_side_in_every_run(tmp_path) -> None:
    """Two ranks, two unrelated calls, no branch around either: no coin toss."""
    seen = set()
    for _ in range(3):
        f = _first_error(job([rank(r, [rec(0, "all_reduce" if r else "broadcast", t=0,
                                            dur=None, site=f"other.py:{3 + r}")])
                              for r in (0, 1)]))
        seen.add(f.ranks)
    assert seen == {(0, 1)}


def test_an_even_split_is_no_majority(tmp_path) -> None:
    runs = [rank(r, [rec(0, t=0, dur=None, site="other.py:3", shape=(4 if r % 2 else 2,))],
                 world=4) for r in range(4)]
    f = _first_error(job(runs, world=4))
    assert f.ranks == (0, 1, 2, 3)
    assert "size" in f.fix
    _agrees(f)


def test_a_plurality_is_no_majority(tmp_path) -> None:
    """Four ranks, three shapes (2, 2, 3, 4 elements): two agree, but not more than half."""
    runs = [rank(r, [rec(0, t=0, dur=None, site="other.py:3", shape=((2, 2, 3, 4)[r],))],
                 world=4) for r in range(4)]
    f = _first_error(job(runs, world=4))
    assert f.ranks == (0, 1, 2, 3)


def _interrupted(wait_s: float, live: bool) -> JobView:
    """Rank 1 in barrier #3 since ``wait_s`` before the user's Ctrl-C; rank 0 computing."""
    from tests.unit.factory import NOW, T0

    r0 = rank(0, [rec(i, t=i) for i in range(3)], cpu_busy=True,
              stack=[{"filename": "/job/train.py", "line": 37, "name": "main"}])
    start = (NOW - T0) / 1e9 - wait_s
    r1 = rank(1, [rec(i, t=i) for i in range(3)] + [rec(3, "barrier", t=start, dur=None)])
    j = job([r0, r1], outcome=None, live=live, hang_timeout=60)
    j.supervisor_events = [{"event": "verdict", "reason": "interrupt", "t": j.now_ns}]
    return j


def test_an_interrupted_run_tells_the_wait_it_saw_as_a_warning() -> None:
    for live in (True, False):  # the supervisor at Ctrl-C, `analyze` afterwards: the same
        found = analyze(_interrupted(4.2, live), [])
        told = [f for f in found if f.kind == "missing_collective"]
        assert told and told[0].severity == Severity.WARNING and told[0].ranks == (0,)
        assert told[0].summary.startswith("when interrupted, rank 1 waits for rank 0")
        assert "(for 4.2 s)" in told[0].summary and "train.py:37" in told[0].summary
        assert not [f for f in found if f.severity == Severity.ERROR]


def test_an_interrupted_run_is_silent_on_a_step_in_progress() -> None:
    found = analyze(_interrupted(0.2, True), [])
    assert not [f for f in found if f.kind == "missing_collective"]


def test_a_failure_nothing_explains_is_not_pinned_on_the_first_root() -> None:
    """Ranks 0 and 1 mismatch on their pair group; rank 3 raises its own error; rank 2 then
    fails of its pair peer's absence: a consequence of rank 3's failure, not of the pair
    mismatch of ranks it shares no group with."""
    from tests.unit.factory import NOW, job as make_job

    groups = {0: [0, 1, 2, 3], 1: [0, 1], 2: [2, 3]}
    own = {"type": "ValueError", "message": "record 9: cannot decode"}
    closed = {"type": "RuntimeError", "message": "[gloo] Connection closed by peer [::1]:1"}
    r0 = rank(0, [rec(0, group=1, t=1, dur=None, site="a.py:1")], world=4, groups=groups)
    r1 = rank(1, [rec(0, "broadcast", group=1, t=1, dur=None, site="a.py:2")], world=4,
              groups=groups)
    r2 = rank(2, [rec(0, group=2, t=1, dur=2, flags=int(L.RecordFlag.FAILED))],
              L.RankState.FAILED, exception=closed, world=4, groups=groups)
    r3 = rank(3, [rec(0, group=2, t=1, dur=0.5)], L.RankState.FAILED,
              exception={**own, "t": NOW - 6 * 10**9}, world=4, groups=groups)  # first
    found = analyze(make_job([r0, r1, r2, r3], world=4, outcome="failed"), [])
    assert not [f for f in found if 2 in f.ranks and f.severity == Severity.ERROR]
    root = next(f for f in found if f.ranks == (3,) and f.severity == Severity.ERROR)
    assert "2" in root.evidence["consequences"]  # rank 2's failure told as its echo
    mismatch = next(f for f in found if f.kind == "collective_mismatch")
    assert "rank 2" not in mismatch.detail


def test_an_all_to_all_one_rank_aborted_in_names_the_split_sizes_and_every_rank() -> None:
    """Rank 0 aborts (gloo's size check) in all_to_all_single #2, which rank 1 completed;
    rank 1 then fails in #3.  The shapes agree: the splits differ, nobody is singled out."""
    closed = {"type": "RuntimeError", "message": "[gloo] Connection reset by peer [::1]:1"}
    a2a = dict(shape=(8, 4), site="moe.py:13")
    r0 = rank(0, steps(2) + [rec(2, "all_to_all_single", t=2, dur=None, **a2a)],
              L.RankState.COMPUTING, fault="Fatal Python error: Aborted\n", returncode=-6)
    r1 = rank(1, steps(2) + [rec(2, "all_to_all_single", t=2, **a2a),
                             rec(3, t=3, dur=1, flags=int(L.RecordFlag.FAILED))],
              L.RankState.FAILED, exception=closed)
    for _ in range(3):  # the same finding every time
        found = analyze(job([r0, r1], outcome="failed"), [])
        errors = [f for f in found if f.severity == Severity.ERROR]
        assert len(errors) == 1 and errors[0].ranks == (0, 1), [f.summary for f in found]
        assert "split sizes" in errors[0].summary and "split sizes" in errors[0].fix


def test_an_absent_rank_held_in_a_loop_on_its_own_input_is_told_that_decision(tmp_path) -> None:
    script = tmp_path / "wait.py"
    script.write_text("import os, time\nwhile not os.path.exists(marker):\n"
                      "    time.sleep(0.05)\n")
    r0 = rank(0, steps(3), cpu_busy=False,
              stack=[{"filename": str(script), "line": 3, "name": "<module>"}])
    r1 = rank(1, steps(3) + [rec(3, "barrier", t=3, dur=None)])
    f = _first_error(job([r0, r1]))
    assert f.kind == "missing_collective" and f.ranks == (0,)
    assert "rank 0 is held at `while not os.path.exists(marker):`" in f.summary
    assert "its own view of the file system" in f.summary
    _agrees(f)
