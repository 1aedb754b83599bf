"""Causes the `Fix:` line must follow, from typed facts: all_to_all_single split sizes as
recorded (one shape per peer), a collective made once per key of a mapping (the same calls
in another order), and the shape advice of a script that already drops its last batch."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ddpdoctor.analysis.engine import analyze
from ddpdoctor.analysis.model import Severity
from ddpdoctor.trace import layout as L
from tests.unit.factory import job, rank, rec, steps


def exchange(seq: int, sent: list[int], got: list[int], dur: float | None = 0.001):
    r = rec(seq, "all_to_all_single", t=seq, dur=dur, site="moe.py:20")
    return replace(r, in_shapes=tuple((n, 4) for n in sent),
                   out_shapes=tuple((n, 4) for n in got))


def errors_of(runs, outcome="failed"):
    return [f for f in analyze(job(runs, outcome=outcome), []) if f.severity == Severity.ERROR]


def test_recorded_split_sizes_that_disagree_name_the_rank_whose_own_sizes_changed() -> None:
    r0 = rank(0, [exchange(0, [4, 4], [4, 4]), exchange(1, [6, 2], [6, 2], dur=None)],
              L.RankState.COMPUTING, fault="Fatal Python error: Aborted\n", returncode=-6)
    r1 = rank(1, [exchange(0, [4, 4], [4, 4]), exchange(1, [4, 4], [4, 4]),
                  rec(2, t=3, dur=1, flags=int(L.RecordFlag.FAILED))],
              L.RankState.FAILED, exception={"type": "RuntimeError",
                                             "message": "Connection reset by peer"})
    found = errors_of([r0, r1])
    assert len(found) == 1 and found[0].ranks == (0,), [f.summary for f in found]
    f = found[0]
    assert "rank 0 sends 2 rows to rank 1, which expects 4" in f.summary
    assert "rank 0 sent [6, 2] rows, after [4, 4]" in f.detail
    assert "rank 0 changed its own split sizes here" in f.summary
    assert f.fix.startswith("Exchange the split sizes") and f.evidence["no_majority"] is True


def test_split_sizes_that_disagree_with_no_history_name_every_side() -> None:
    """The first exchange already disagrees: nothing in the ranks' own history singles
    one out, so both are named and the finding says so."""
    r0 = rank(0, [exchange(0, [6, 2], [6, 2], dur=None)], L.RankState.COMPUTING,
              fault="Fatal Python error: Aborted\n", returncode=-6)
    r1 = rank(1, [exchange(0, [4, 4], [4, 4], dur=None)], L.RankState.FAILED,
              exception={"type": "RuntimeError", "message": "Connection reset by peer"})
    [f] = errors_of([r0, r1])
    assert f.ranks == (0, 1) and "no rank can be singled out" in f.summary


def test_recorded_split_sizes_that_agree_are_no_finding() -> None:
    runs = [rank(r, [exchange(0, [4, 4], [4, 4]), exchange(1, [6, 2] if r == 0 else [2, 2],
                                                           [6, 2] if r == 0 else [2, 2])] +
                 steps(2, t0=3, seq0=2)) for r in (0, 1)]
    assert errors_of(runs, outcome="completed") == []


def _script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "train.py"
    path.write_text(body)
    line = next(i + 1 for i, t in enumerate(body.splitlines()) if "all_reduce" in t)
    return f"{path}:{line}"


def _shape_mismatch(site: str) -> list:
    runs = [rank(r, steps(2) + [rec(2, t=3, dur=None, site=site,
                                    shape=(4,) if r == 0 else (1,))], world=3)
            for r in range(3)]
    return errors_of(runs, outcome="hung")


def test_a_collective_made_once_per_key_of_a_mapping_is_told_as_an_order(tmp_path) -> None:
    site = _script(tmp_path, "for name, total in running.items():\n"
                             "    dist.all_reduce(total)\n")
    [f] = _shape_mismatch(site)
    assert f.ranks == (0,) and "`for name, total in running.items():`" in f.detail
    assert f.fix.startswith("Make the calls in one order") and "pad" not in f.fix


def test_a_shape_difference_in_an_ordered_loop_keeps_the_size_fix(tmp_path) -> None:
    site = _script(tmp_path, "for batch in range(10):\n    dist.all_reduce(batch)\n")
    [f] = _shape_mismatch(site)
    assert "pad to the largest size" in f.fix and "drop_last" in f.fix


def test_the_size_fix_does_not_advise_drop_last_to_a_script_that_has_it(tmp_path) -> None:
    site = _script(tmp_path, "loader = DataLoader(ds, drop_last=True)\n"
                             "for batch in loader:\n    dist.all_reduce(batch)\n")
    [f] = _shape_mismatch(site)
    assert "pad to the largest size" in f.fix and "drop_last" not in f.fix
