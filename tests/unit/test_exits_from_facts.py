"""Why a rank left the loop, from the user's source and the ranks' facts: a flag set under a
rank test, a flag from a metric, a `continue` in an `except` reached through a helper (its
line found on the waiting rank's traceback), and ranks that left together as one finding."""

from __future__ import annotations

from pathlib import Path

from ddpdoctor.analysis.explain.loop_exits import loop_exit
from ddpdoctor.analysis.engine import analyze
from ddpdoctor.analysis.model import Severity
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.origin import Origin
from tests.unit.factory import job, rank, rec

BUCKET = int(L.RecordFlag.BUCKET)


def _script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "train.py"
    path.write_text(body)
    return path


def _line(path: Path, text: str) -> int:
    return next(i + 1 for i, t in enumerate(path.read_text().splitlines()) if text in t)


def test_a_flag_set_under_a_rank_test_is_decided_by_the_rank(tmp_path) -> None:
    path = _script(tmp_path, "stop = False\nfor step in range(9):\n    work()\n"
                             "    if rank == 0:\n        stop = poll(step)\n"
                             "    if stop: break\nbarrier()\n")
    found = loop_exit(f"{path}:{_line(path, 'work()')}", skipped=False)
    assert found is not None and found.decided_by == "its rank"
    assert "`stop` is set under `if rank == 0:` at line 5" in str(found.condition)


def test_a_flag_from_a_score_is_decided_by_that_score(tmp_path) -> None:
    path = _script(tmp_path, "for step in range(9):\n    work()\n"
                             "    done = val_loss > best_loss\n    if done: break\n")
    found = loop_exit(f"{path}:{_line(path, 'work()')}", skipped=False)
    assert found is not None and found.decided_by == "its own validation score"


def _bucket(seq: int, site: str, dur: float | None = 0.001, failed: bool = False):
    return rec(seq, t=seq, dur=dur, site=site, origin=Origin.DDP_BACKWARD,
               flags=BUCKET | (int(L.RecordFlag.FAILED) if failed else 0))


def test_a_step_skipped_in_an_except_is_found_from_the_waiting_ranks_traceback(
        tmp_path) -> None:
    path = _script(tmp_path, "def train_step(x):\n    loss = model(x)\n    loss.backward()\n"
                             "\n\nfor step in range(6):\n    try:\n        train_step(x)\n"
                             "    except RuntimeError as e:\n        if 'memory' in str(e):\n"
                             "            continue\n        raise\n    opt.step()\n")
    site = f"{path}:{_line(path, 'loss.backward()')}"
    outer = {"filename": str(path), "line": _line(path, "        train_step(x)"),
             "name": "<module>"}
    reset = {"type": "RuntimeError", "message": "Connection reset by peer",
             "traceback": [outer, {"filename": str(path), "line": 3, "name": "train_step"},
                           {"filename": "/site-packages/torch/autograd/graph.py", "line": 979,
                            "name": "_engine_run_backward"}]}
    r0 = rank(0, [_bucket(i, site) for i in range(5)] + [_bucket(5, site, 1, failed=True)],
              L.RankState.FAILED, step=6, exception=reset)
    r1 = rank(1, [_bucket(i, site) for i in range(5)], L.RankState.EXITED, step=5)
    errors = [f for f in analyze(job([r0, r1], outcome="failed"), [])
              if f.severity == Severity.ERROR]
    assert errors and errors[0].ranks == (1,), [(f.kind, f.ranks, f.summary) for f in errors]
    assert f"`continue` at train.py:{_line(path, 'continue')}" in errors[0].summary
    assert "an exception this rank caught on its own" in errors[0].summary
    assert errors[0].fix.startswith("Decide together")


def test_ranks_that_left_after_as_many_steps_are_one_finding() -> None:
    site = "train.py:10"
    waiting = [rank(r, [_bucket(i, site) for i in range(2)] + [_bucket(2, site, dur=None)],
                    step=2, world=4, returncode=-15) for r in (0, 1)]
    gone = [rank(r, [_bucket(i, site) for i in range(2)], L.RankState.EXITED, step=2, world=4)
            for r in (2, 3)]
    errors = [f for f in analyze(job(waiting + gone, outcome="failed"), [])
              if f.severity == Severity.ERROR]
    assert [(f.kind, f.ranks) for f in errors] == [("uneven_batches", (2, 3))], \
        [(f.kind, f.ranks, f.summary) for f in errors]
    assert errors[0].summary.startswith("ranks 2 and 3 ")
