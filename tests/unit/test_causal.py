"""The causal model on hand-built jobs: one shape a test, root cause named, victims not."""

from __future__ import annotations

from ddpdoctor.analysis.causal.diagnose import diagnose
from ddpdoctor.analysis.causal.pattern import breaks_pattern
from ddpdoctor.analysis.causal.verdict import HangVerdict, Straggling, hang_verdict, judge
from ddpdoctor.analysis.engine import analyze
from ddpdoctor.analysis.model import NS, Finding, JobView, Severity
from ddpdoctor.trace import layout as L
from tests.unit.factory import (NOW, T0, frame, job, mark, rank, rec, recv, steps)

FAILED = int(L.RecordFlag.FAILED)
CLOSED = {"type": "RuntimeError", "message": "[gloo] Connection closed by peer [127.0.0.1]:1"}
TIMEOUT = {"type": "RuntimeError", "message": "[gloo] Timed out waiting 4000ms for recv"}


def errors(found: list[Finding]) -> list[Finding]:
    return [f for f in found if f.severity == Severity.ERROR]


def check(j: JobView, culprits: tuple[int, ...], only_waited: set[int],
          kind: str | None = None) -> list[Finding]:
    """The first error names the culprits; no error finding names a rank that only waited."""
    found = analyze(j, [])
    errs = errors(found)
    assert errs, [f.summary for f in found]
    assert errs[0].ranks == culprits, [(f.kind, f.ranks, f.summary) for f in found]
    if kind:
        assert errs[0].kind == kind, errs[0]
    for f in errs:
        assert not set(f.ranks) & only_waited, (f.kind, f.ranks, f.summary)
    return found


def test_clean_early_exit_with_uneven_step_counts_blames_the_exited_rank() -> None:
    r0 = rank(0, steps(10) + [rec(10, t=10, dur=1, flags=FAILED)], L.RankState.FAILED,
              step=11, exception=CLOSED)
    r1 = rank(1, steps(10), L.RankState.EXITED, step=10)
    found = check(job([r0, r1], outcome="failed"), (1,), {0}, "uneven_batches")
    info = [f for f in found if f.kind == "rank_failed"]
    assert info and info[0].severity == Severity.INFO and info[0].ranks == (0,)
    assert found[info[0].caused_by].kind == "uneven_batches"  # type: ignore[index]


def test_clean_exit_while_the_peer_is_inside_one_more_ddp_step_is_uneven() -> None:
    bucket = int(L.RecordFlag.BUCKET)
    r0 = rank(0, steps(2) + [rec(2, t=2, dur=None, flags=bucket)], step=2)
    r1 = rank(1, steps(2), L.RankState.EXITED, step=2)
    found = check(job([r0, r1]), (1,), {0}, "uneven_batches")
    assert "rank 1 ran 2 steps and exited while rank 0 went on to step 3" in found[0].summary


def test_pg_timeout_while_peer_computes_names_the_computing_rank(tmp_path) -> None:
    src = tmp_path / "eval.py"
    src.write_text("\n" * 87 + "score = evaluate(model)\n")
    r0 = rank(0, [rec(0, t=1, dur=4, flags=FAILED)], L.RankState.FAILED, exception=TIMEOUT)
    r1 = rank(1, [rec(0, t=13, dur=0.1, flags=FAILED)], L.RankState.FAILED, exception=CLOSED,
              stack=[frame("/usr/lib/python3.12/site-packages/torch/x.py", 1),
                     frame(str(src), 88, "evaluate")])
    found = check(job([r0, r1], outcome="failed"), (1,), {0}, "missing_collective")
    assert "eval.py:88" in found[0].summary and "score = evaluate(model)" in found[0].summary
    consequence = next(f for f in found if f.kind == "rank_failed")
    assert consequence.severity == Severity.INFO and consequence.caused_by == 0
    assert 0 in consequence.ranks


def test_four_rank_subgroup_skip_blames_the_skipping_rank() -> None:
    groups = {0: [0, 1, 2, 3], 1: [0, 1], 2: [2, 3]}
    pair, world_site, pair_site = {0: 1, 1: 1, 2: 2, 3: 2}, "train.py:32", "train.py:30"
    runs = []
    for r in range(4):
        recs = []
        for step in range(3):
            skip = r == 1 and step == 2
            last = step == 2
            if not skip:
                recs.append(rec(step, group=pair[r], t=2 * step, site=pair_site,
                                dur=None if last and r == 0 else 0.01))
            if not (last and r == 0):
                recs.append(rec(step, group=0, t=2 * step + 1, site=world_site,
                                dur=None if last else 0.01))
        runs.append(rank(r, recs, world=4, groups=groups))
    found = check(job(runs), (1,), {0, 2, 3})
    assert "skipped" in found[0].summary


def test_two_group_lock_order_is_one_deadlock_naming_both_ranks_and_groups() -> None:
    groups = {0: [0, 1], 1: [0, 1], 2: [0, 1]}
    r0 = rank(0, [rec(0, group=1, t=1, dur=None, site="sync.py:20")], groups=groups)
    r1 = rank(1, [rec(0, group=2, t=1, dur=None, site="sync.py:23")], groups=groups)
    found = check(job([r0, r1]), (0, 1), set(), "deadlock")
    assert len(errors(found)) == 1
    assert found[0].evidence["groups"] == ["1", "2"]


def test_p2p_recv_recv_is_a_deadlock() -> None:
    d = diagnose(job([rank(0, [recv(0, 1, t=1)]), rank(1, [recv(0, 0, t=1)])]))
    assert [f.kind for f in d.findings if f.severity == Severity.ERROR] == ["deadlock"]
    assert {w.rank: w.waits_for for w in d.waits} == {0: (1,), 1: (0,)}
    assert "batch_isend_irecv" in d.findings[0].fix


def test_stuck_before_init_names_the_rank_that_never_arrived(tmp_path) -> None:
    src = tmp_path / "download.py"
    src.write_text("\n" * 29 + "vocab = conn.recv(1 << 16)\n")
    r0 = rank(0, [mark("init", t=1, dur=None)], init=False)
    r1 = rank(1, [], L.RankState.STARTING, init=False, stack=[frame(str(src), 30, "download")])
    found = check(job([r0, r1]), (1,), {0}, "missing_collective")
    assert "init_process_group" in found[0].summary and "download.py:30" in found[0].summary
    d = diagnose(job([r0, r1]))
    assert [w.to_dict() for w in d.waits] == [
        {"rank": 0, "waits_for": [1], "group": "rendezvous", "seq": None, "op": "init"}]


def test_a_rank_with_no_trace_has_not_arrived() -> None:
    r0 = rank(0, [mark("init", t=1, dur=None)], init=False)
    found = check(job([r0], world=2), (1,), {0})
    assert "has not joined" in found[0].summary


def _straggler(cpu_busy: bool, progress_s_ago: float) -> JobView:
    r0 = rank(0, steps(3) + [rec(3, t=NOW / NS - T0 / NS - 10, dur=None)])
    r1 = rank(1, steps(3), cpu_busy=cpu_busy, stack=[frame("eval.py", 88, "evaluate")])
    r1.progress_ns = NOW - int(progress_s_ago * NS)
    r0.progress_ns = NOW - 10 * NS
    return job([r0, r1], outcome=None, live=True)


def test_busy_straggler_gets_no_hang_verdict() -> None:
    j = _straggler(cpu_busy=True, progress_s_ago=0.1)
    assert hang_verdict(j, 5.0) is None
    said = judge(j, 5.0)
    assert isinstance(said, Straggling) and said.ranks == (1,)
    assert "rank 1 is computing at eval.py:88" in said.message


def test_a_straggler_in_a_chosen_wait_is_not_said_to_compute() -> None:
    """A rank whose progress is I/O, its workers or a bounded wait (proc/progress.py) is a
    straggler, and is not described as computing."""
    said = judge(_straggler(cpu_busy=False, progress_s_ago=0.1), 5.0)
    assert isinstance(said, Straggling) and said.ranks == (1,)
    assert "rank 1 is working (I/O, its workers, or a wait it chose) at eval.py:88" \
        in said.message


def test_a_sleeping_rank_others_wait_for_is_a_hang() -> None:
    verdict = hang_verdict(_straggler(cpu_busy=False, progress_s_ago=30), 5.0)
    assert isinstance(verdict, HangVerdict) and verdict.absent == (1,)
    assert "rank 0 waits for rank 1 in all_reduce #3" in verdict.message


def test_a_live_diagnosis_blames_nobody_the_stop_rule_lets_run() -> None:
    """One decision: live, the diagnosis judges only the waits the stop rule calls hopeless.
    A wait past the timeout on a straggler is no finding; on a rank asleep for 30 s it is
    the same rank the verdict names."""
    j = _straggler(cpu_busy=True, progress_s_ago=0.1)
    j.hang_timeout = 5.0
    assert isinstance(judge(j, 5.0), Straggling)
    assert [f for f in diagnose(j).findings if f.severity == Severity.ERROR] == []
    hung = _straggler(cpu_busy=False, progress_s_ago=30)
    hung.hang_timeout = 5.0
    verdict = judge(hung, 5.0)
    errors = [f for f in diagnose(hung).findings if f.severity == Severity.ERROR]
    assert isinstance(verdict, HangVerdict) and errors and tuple(errors[0].ranks) == verdict.absent


def test_no_verdict_before_the_timeout() -> None:
    assert hang_verdict(_straggler(cpu_busy=False, progress_s_ago=30), 60.0) is None


def test_mismatch_by_majority_blames_the_odd_rank() -> None:
    runs = [rank(r, steps(2) + [rec(2, t=2, dur=None, shape=(8,) if r == 2 else (4,))],
                 world=3) for r in range(3)]
    check(job(runs), (2,), {0, 1}, "collective_mismatch")


def test_two_rank_mismatch_blames_the_rank_that_breaks_its_own_pattern() -> None:
    def history(r: int) -> list:
        out = []
        for i in range(3):
            out += [rec(2 * i, t=2 * i, site="train.py:10"),
                    rec(2 * i + 1, "broadcast", t=2 * i + 1, site="train.py:11")]
        last = rec(6, "all_gather", t=7, dur=None, site="train.py:40") if r == 1 else \
            rec(6, t=7, dur=None, site="train.py:10")
        return out + [last]
    check(job([rank(0, history(0)), rank(1, history(1))]), (1,), {0}, "collective_mismatch")


def test_two_rank_mismatch_blames_the_rank_whose_call_has_no_precedent() -> None:
    # rank 1 repeats its pattern; rank 0 entered an evaluation whose first call (seq 6)
    # still matched, so its own history says nothing about what follows it.
    def history(r: int) -> list:
        out = []
        for i in range(3):
            out += [rec(2 * i, t=2 * i, site="train.py:10"),
                    rec(2 * i + 1, "all_gather", t=2 * i + 1, site="train.py:12")]
        if r == 0:
            return out + [rec(6, t=6, site="eval.py:40"),
                          rec(7, "broadcast", t=7, dur=None, site="eval.py:44")]
        return out + [rec(6, t=6, site="train.py:10"),
                      rec(7, "all_gather", t=7, dur=None, site="train.py:12")]
    check(job([rank(0, history(0)), rank(1, history(1))]), (0,), {1}, "collective_mismatch")


def test_crash_with_last_words_is_the_root_and_the_peer_a_consequence() -> None:
    boom = {"type": "ValueError", "message": "bad batch shape"}
    r0 = rank(0, steps(5) + [rec(5, t=5, dur=2, flags=FAILED)], L.RankState.FAILED,
              exception=CLOSED)
    r1 = rank(1, steps(5), L.RankState.FAILED, exception=boom)
    found = check(job([r0, r1], outcome="failed"), (1,), {0}, "rank_failed")
    assert "bad batch shape" in found[0].summary
    assert [f.kind for f in found] == ["rank_failed"]  # rank 0's echo is told inside it
    assert found[0].evidence["consequences"] == {"0": CLOSED["type"] + ": " + CLOSED["message"]}


def test_missing_collective_names_the_rank_that_exited_with_its_last_call() -> None:
    r0 = rank(0, steps(4) + [rec(4, "barrier", t=4, dur=None, site="train.py:50")], step=4)
    r1 = rank(1, steps(4), L.RankState.EXITED, step=4)
    found = check(job([r0, r1]), (1,), {0}, "missing_collective")
    assert "exited cleanly after seq 3" in found[0].summary


def test_eight_ranks_one_computing_rank_is_named_once() -> None:
    runs = [rank(r, steps(3) + ([] if r == 5 else [rec(3, t=3, dur=None)]), world=8,
                 stack=[frame("train.py", 77, "log_metrics")] if r == 5 else None)
            for r in range(8)]
    found = check(job(runs), (5,), set(range(8)) - {5}, "missing_collective")
    assert len(errors(found)) == 1
    assert sorted(w.rank for w in diagnose(job(runs)).waits) == [0, 1, 2, 3, 4, 6, 7]


def test_teardown_abort_after_matched_collectives_is_its_own_warning() -> None:
    r0 = rank(0, steps(5), L.RankState.EXITED, step=5)
    r1 = rank(1, steps(5), L.RankState.COMPUTING, step=5, returncode=-6,
              fault="Fatal Python error: Aborted\n\nterminate called without an active exception")
    found = analyze(job([r0, r1], outcome="failed"), [])
    assert not errors(found)
    assert found[0].kind == "rank_failed" and found[0].severity == Severity.WARNING
    assert found[0].ranks == (1,) and found[0].evidence["teardown"] is True
    assert "destroy_process_group" in found[0].fix
    assert not any(f.kind == "collective_mismatch" for f in found)


def test_teardown_abort_after_a_barrier_is_put_on_torchs_teardown() -> None:
    """Every collective matched and the last was a barrier: the advice to add a barrier
    would be wrong; gloo's teardown abort at interpreter exit is torch's."""
    ends = [rec(5, "barrier", t=5)]
    r0 = rank(0, steps(5) + ends, L.RankState.EXITED, step=5)
    r1 = rank(1, steps(5) + ends, L.RankState.COMPUTING, step=5, returncode=-6,
              fault="Fatal Python error: Aborted")
    found = analyze(job([r0, r1], outcome="failed"), [])
    assert not errors(found)
    assert found[0].kind == "rank_failed" and found[0].ranks == (1,)
    assert "Nothing in the collectives to fix" in found[0].fix
    assert "Call dist.barrier" not in found[0].fix


def test_teardown_abort_whose_launcher_then_terminates_the_peer_is_a_warning() -> None:
    r0 = rank(0, steps(5), step=5, returncode=-6, fault="Fatal Python error: Aborted")
    r1 = rank(1, steps(5), step=5, returncode=-15)
    found = analyze(job([r0, r1], outcome="failed"), [])
    assert not errors(found)
    assert [(f.kind, f.ranks, f.severity) for f in found] == [
        ("rank_failed", (0,), Severity.WARNING)]
    assert "rank 1 killed by SIGTERM" in found[0].detail


def test_an_abort_before_the_peers_last_collective_is_no_teardown() -> None:
    r0 = rank(0, steps(6) + [rec(6, t=6, dur=None)], step=6)
    r1 = rank(1, steps(6), returncode=-6, fault="Fatal Python error: Aborted")
    found = check(job([r0, r1]), (1,), {0}, "rank_failed")
    assert "teardown" not in found[0].summary


def test_healthy_job_gets_no_finding_and_no_waits() -> None:
    runs = [rank(r, steps(5), L.RankState.EXITED, step=5) for r in range(2)]
    d = diagnose(job(runs, outcome="completed"))
    assert d.findings == [] and d.waits == []


def test_live_waits_shorter_than_the_timeout_are_not_findings() -> None:
    r0 = rank(0, steps(3) + [rec(3, t=NOW / NS - T0 / NS - 1, dur=None)])
    r1 = rank(1, steps(3))
    d = diagnose(job([r0, r1], outcome=None, live=True))
    assert d.findings == [] and [w.waits_for for w in d.waits] == [(1,)]


def test_pattern_rule() -> None:
    assert breaks_pattern("ababb") is True
    assert breaks_pattern("ababa") is False
    assert breaks_pattern("ab") is None
    assert breaks_pattern("abc") is None


def test_a_rank_stuck_in_new_group_waits_for_the_rank_that_has_not_called_it() -> None:
    r0 = rank(0, steps(1) + [mark("new_group", t=2, dur=None)])
    r1 = rank(1, steps(1), stack=[frame("prep.py", 12, "build_index")])
    found = check(job([r0, r1]), (1,), {0}, "missing_collective")
    assert "new_group" in found[0].summary and "prep.py:12" in found[0].summary


def test_a_rank_in_a_dataloader_is_loading_data() -> None:
    loader = "/usr/lib/python3.12/site-packages/torch/utils/data/dataloader.py"
    r0 = rank(0, steps(2) + [rec(2, t=2, dur=None)])
    r1 = rank(1, steps(2), stack=[frame(loader, 700, "_next_data"),
                                  frame(loader, 650, "__next__"), frame("train.py", 40)])
    found = check(job([r0, r1]), (1,), {0}, "missing_collective")
    assert "rank 1 is loading data at train.py:40" in found[0].summary


def test_ranks_failing_the_same_way_share_one_finding() -> None:
    same = {"type": "RuntimeError", "message": "Expected to have finished reduction"}
    runs = [rank(r, steps(2), L.RankState.FAILED, exception=same) for r in range(2)]
    found = check(job(runs, outcome="failed"), (0, 1), set(), "rank_failed")
    assert len(found) == 1


def test_a_loader_fed_rank_that_stops_early_is_a_missing_collective() -> None:
    bucket = int(L.RecordFlag.BUCKET)
    epoch = [{"event": "loader_epoch", "loader": 0, "epoch": 0, "length": 2, "shuffle": True,
              "steps": 0, "t": 1},
             {"event": "loader_end", "loader": 0, "epoch": 0, "batches": 2, "order": "a",
              "content": "0", "steps": 2}]
    r0 = rank(0, steps(2) + [rec(2, t=2, dur=None, flags=bucket)], step=2, meta=epoch)
    r1 = rank(1, steps(2), L.RankState.EXITED, step=2, meta=epoch)
    check(job([r0, r1]), (1,), {0}, "missing_collective")


def test_a_framework_call_names_the_users_line_that_made_it() -> None:
    lightning = "lightning/pytorch/strategies/ddp.py:247"
    r0 = rank(0, steps(2) + [rec(2, "all_gather", t=2, dur=None, site="train.py:30",
                                 framework=lightning)])
    r1 = rank(1, steps(2), stack=[frame("train.py", 44, "validation_step")])
    found = check(job([r0, r1]), (1,), {0}, "missing_collective")
    assert "all_gather #2 at lightning/.../ddp.py:247, called from train.py:30" in \
        found[0].summary


def test_a_rank_that_aborts_leaving_early_is_the_early_exit_not_a_crash() -> None:
    # rank 0 ran out of batches, called destroy_process_group and gloo aborted it there;
    # rank 1 waited in its 5th all_reduce and failed of rank 0's absence
    r0 = rank(0, steps(4), step=4, returncode=-6, fault="Fatal Python error: Aborted",
              meta=[{"event": "destroy", "t": T0 + 4 * NS}])
    r1 = rank(1, steps(4) + [rec(4, t=5, dur=None)], step=4, returncode=-6,
              fault="Fatal Python error: Aborted")
    found = analyze(job([r0, r1], outcome="failed"), [])
    errs = errors(found)
    assert len(errs) == 1 and errs[0].ranks == (0,), found
    assert errs[0].kind in ("uneven_batches", "missing_collective")
    assert "died on its way out" in errs[0].detail
    assert not [f for f in found if f.kind == "rank_failed" and f.severity == Severity.ERROR]


def test_an_abort_outside_any_call_without_leaving_stays_a_crash() -> None:
    r0 = rank(0, steps(6) + [rec(6, t=6, dur=None)], step=6)
    r1 = rank(1, steps(6), returncode=-6, fault="Fatal Python error: Aborted\n  File "
              "\"train.py\", line 40 in compute")
    found = check(job([r0, r1]), (1,), {0}, "rank_failed")
    assert "died on its way out" not in found[0].detail


def test_a_rank_that_returned_then_got_the_launchers_sigterm_exited_cleanly() -> None:
    # rank 1 returned after 2 steps (atexit ran: EXITED); rank 0 failed in step 3 and
    # torchrun SIGTERMed rank 1 while its interpreter was still tearing down
    r0 = rank(0, steps(2) + [rec(2, t=3, dur=0.5, flags=int(L.RecordFlag.FAILED))], step=2,
              exception={"type": "RuntimeError", "message": "Connection closed by peer"})
    r1 = rank(1, steps(2), L.RankState.EXITED, step=2, returncode=-15)
    found = analyze(job([r0, r1], outcome="failed"), [])
    errs = errors(found)
    assert errs and errs[0].ranks == (1,), found
    assert not [f for f in found if f.kind == "rank_failed" and 1 in f.ranks]


def test_every_rank_inside_init_with_none_missing_is_a_stalled_call(tmp_path) -> None:
    src = tmp_path / "train.py"
    src.write_text("\n" * 3 + "dist.init_process_group('gloo')\n")
    note = {"event": "notice", "text": "TORCH_FR_BUFFER_SIZE='' is not an integer"}
    runs = [rank(r, [mark("init", t=1, dur=None)], L.RankState.STARTING, init=False,
                 stack=[frame(str(src), 4, "<module>")], meta=[note]) for r in (0, 1)]
    found = check(job(runs), (0, 1), set(), "stalled_call")
    assert "every rank (2) is inside init_process_group at train.py:4" in found[0].summary
    assert "TORCH_FR_BUFFER_SIZE" in found[0].detail
    verdict = hang_verdict(job(runs, outcome=None, live=True), 5.0)
    assert verdict is not None and "every rank is inside it" in verdict.message
    assert "?" not in verdict.message
    assert not errors(analyze(job(runs, outcome="failed"), []))  # only a hung job stalls


def test_every_rank_inside_the_same_collective_is_a_stalled_call() -> None:
    runs = [rank(r, steps(3) + [rec(3, t=4, dur=None)]) for r in (0, 1, 2)]
    found = check(job(runs), (0, 1, 2), set(), "stalled_call")
    assert found[0].seq == 3 and "all_reduce #3 on group 0" in found[0].summary
    late = [rank(0, steps(3) + [rec(3, t=4, dur=None)]), rank(1, steps(3))]
    assert check(job(late), (1,), {0})[0].kind == "missing_collective"


def test_a_dataloader_workers_error_is_told_by_its_own_words_and_line() -> None:
    """The main process re-raises a worker's error as "Caught ValueError in DataLoader worker
    process 0" with the worker's traceback as text: the finding quotes the worker's error
    and its line, not the wrapper's."""
    from ddpdoctor.analysis.causal.facts import state_of

    wrapped = ("Caught ValueError in DataLoader worker process 0.\nOriginal Traceback (most "
               "recent call last):\n  File \"/usr/lib/python3/site-packages/torch/utils/data/"
               "_utils/worker.py\", line 349, in _worker_loop\n    data = fetcher.fetch(index)\n"
               "  File \"/home/u/data.py\", line 16, in __getitem__\n    raise ValueError(f\"record"
               " {i}: unexpected end of data\")\nValueError: record 42: unexpected end of data\n")
    r1 = rank(1, steps(2), exception={"type": "ValueError", "message": wrapped}, returncode=1)
    death = state_of(r1, job([rank(0, steps(2)), r1])).death
    assert death is not None and death.cause == (
        "ValueError: record 42: unexpected end of data (in DataLoader worker process 0)")
    assert death.where == "data.py:16"
