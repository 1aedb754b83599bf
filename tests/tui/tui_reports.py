"""Builders of realistic hang reports (schema ddpdoctor.report/1 plus UI extensions) for the UI tests."""

from __future__ import annotations

import copy
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
HANG_4RANKS = FIXTURES / "report_hang_4ranks.json"

T0 = 1747218063.0  # 2025-05-14T10:21:03Z
SITE = "/usr/local/lib/python3.11/site-packages"
PYLIB = "/usr/local/lib/python3.11"
SCRIPT = "/home/ana/proj/train.py"


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _frames(op: str, user_line: int, user_fn: str) -> list[dict[str, Any]]:
    """A py-spy stack (innermost first) of a rank blocked in `op`, called from the user's script."""
    return [
        {"name": "wait", "filename": f"{SITE}/torch/distributed/distributed_c10d.py", "line": 2862},
        {"name": op, "filename": f"{SITE}/torch/distributed/distributed_c10d.py", "line": 2801 if op == "all_reduce" else 2737},
        {"name": "wrapper", "filename": f"{SITE}/torch/distributed/c10d_logger.py", "line": 81},
        {"name": user_fn, "filename": SCRIPT, "line": user_line},
        {"name": "train_one_epoch", "filename": SCRIPT, "line": 71},
        {"name": "main", "filename": SCRIPT, "line": 104},
        {"name": "<module>", "filename": SCRIPT, "line": 112},
        {"name": "_run_code", "filename": f"{PYLIB}/runpy.py", "line": 88},
        {"name": "_run_module_as_main", "filename": f"{PYLIB}/runpy.py", "line": 198},
    ]


def _timeline_entry(seq: int, op: str, shapes: list[list[int]], start: float, end: float | None, line: int) -> dict[str, Any]:
    return {
        "seq": seq,
        "group": "0",
        "op": op,
        "shapes": shapes,
        "dtypes": ["float32"],
        "callsite": f"train.py:{line}",
        "start": round(start, 3),
        "end": None if end is None else round(end, 3),
    }


def make_hang_report(world_size: int = 4, culprit: int = 2, hang_seq: int = 7) -> dict[str, Any]:
    """A collective_mismatch hang: `culprit` called broadcast at `hang_seq` while the others called all_reduce."""
    grad = [[4096, 1024]]
    hang_start = T0 + 6.2
    ended = hang_start + 61.0
    ranks, timeline, profile = [], {}, {}
    for rank in range(world_size):
        late = 0.05 * (rank % 4)
        entries = [_timeline_entry(0, "broadcast", [[1024, 784]], T0 + 1.0 + late, T0 + 1.1 + late, 96)]
        for seq in range(1, hang_seq):
            start = T0 + 1.2 + 0.7 * seq + late
            entries.append(_timeline_entry(seq, "all_reduce", grad, start, start + 0.08 + 0.01 * rank, 58))
        is_culprit = rank == culprit
        op = "broadcast" if is_culprit else "all_reduce"
        shapes = [[1]] if is_culprit else grad
        line = 63 if is_culprit else 58
        entries.append(_timeline_entry(hang_seq, op, shapes, hang_start + late, None, line))
        timeline[str(rank)] = entries
        ranks.append(
            {
                "rank": rank,
                "host": f"gpu-node-{rank // 8:02d}",
                "pid": 41200 + rank * 7,
                "state": "hung",
                "exit_code": None,
                "step": 6,
                "epoch": 0,
                "last_seq": hang_seq,
                "current": {
                    "seq": hang_seq,
                    "op": op,
                    "shapes": shapes,
                    "dtypes": ["float32"],
                    "since": iso(hang_start + late),
                    "callsite": f"train.py:{line}",
                },
                "stack": _frames(op, line, "sync_loss_scale" if is_culprit else "train_step"),
                "recent": entries[-20:],
            }
        )
        wait = 61.0 - late + 0.4 * (rank != culprit)
        profile[str(rank)] = {"compute_s": round(5.0 - late, 3), "wait_s": round(wait, 3), "collectives": hang_seq + 1}
    others = [r for r in range(world_size) if r != culprit]
    others_text = "ranks " + ",".join(map(str, others)) if len(others) <= 8 else f"the other {len(others)} ranks"
    return {
        "schema": "ddpdoctor.report/1",
        "outcome": "hung",
        "command": ["torchrun", "--nproc-per-node", str(world_size), "train.py", "--epochs", "3"],
        "world_size": world_size,
        "started_at": iso(T0),
        "ended_at": iso(ended),
        "run_dir": "ddpdoctor-runs/20250514-102103-7f3a",
        "live": False,
        "ranks": ranks,
        "findings": [
            {
                "kind": "collective_mismatch",
                "severity": "error",
                "ranks": [culprit],
                "seq": hang_seq,
                "summary": (
                    f"rank {culprit} called broadcast at seq {hang_seq} (train.py:63) while "
                    f"{others_text} called all_reduce (train.py:58)"
                ),
                "detail": (
                    f"At seq {hang_seq} of the default process group the ranks disagree on the collective: "
                    f"rank {culprit} entered broadcast([1] float32, src=0) from sync_loss_scale at "
                    f"train.py:63, {others_text} entered all_reduce([4096x1024] float32, sum) "
                    "from train_step at train.py:58. Neither can complete: every rank waits for "
                    "the others to join the same collective. Up to seq "
                    f"{hang_seq - 1} all ranks agreed."
                ),
                "fix": (
                    f"Make every rank call the same collectives in the same order. The call at "
                    f"train.py:63 runs only on rank {culprit} (it is inside `if rank == {culprit}:`); "
                    "move the broadcast out of the rank-dependent branch, or call it on every rank."
                ),
                "evidence": {
                    "seq": hang_seq,
                    "group": "0",
                    "by_rank": {
                        str(r): {
                            "op": "broadcast" if r == culprit else "all_reduce",
                            "shapes": [[1]] if r == culprit else grad,
                            "callsite": "train.py:63" if r == culprit else "train.py:58",
                        }
                        for r in range(min(world_size, 4))
                    },
                    "agreed_until_seq": hang_seq - 1,
                },
            },
            {
                "kind": "straggler",
                "severity": "info",
                "ranks": [3],
                "seq": None,
                "summary": "rank 3 reaches collectives 0.15s after the others on average",
                "detail": "Over seqs 0-6, rank 3 entered each all_reduce 0.15s after rank 0 (median).",
                "fix": "Check rank 3's data loading and host; this did not cause the hang.",
                "evidence": {"median_lag_s": 0.15, "seqs": [0, 6]},
            },
        ],
        "timeline": timeline,
        "profile": profile,
        "problems": [],
    }


def live_variant(report: dict[str, Any], **rank_states: str) -> dict[str, Any]:
    """A copy of `report` marked live, with some ranks' states changed: live_variant(r, r2="computing")."""
    out = copy.deepcopy(report)
    out["live"] = True
    out["outcome"] = ""
    for key, state in rank_states.items():
        rank = int(key.lstrip("r"))
        out["ranks"][rank]["state"] = state
    return out


def write_fixture() -> Path:
    HANG_4RANKS.parent.mkdir(parents=True, exist_ok=True)
    HANG_4RANKS.write_text(json.dumps(make_hang_report(), indent=2) + "\n")
    return HANG_4RANKS


if __name__ == "__main__":
    print(write_fixture())


def make_waits_report() -> dict[str, Any]:
    """A 4-rank hang with its wait-for graph: ranks 0 and 2 wait for rank 1 (computing in
    eval.py) in all_reduce #57; rank 3 waits for rank 2 in a broadcast of group 1; rank 0's
    gloo timeout is a consequence of rank 1 (caused_by)."""
    report = make_hang_report(world_size=4, culprit=1, hang_seq=57)
    ranks = report["ranks"]
    ranks[1].update(state="computing", current=None, stack=[
        {"name": "forward", "filename": f"{SITE}/torch/nn/modules/linear.py", "line": 125},
        {"name": "evaluate", "filename": "/home/ana/proj/eval.py", "line": 88},
        {"name": "main", "filename": SCRIPT, "line": 104},
        {"name": "<module>", "filename": SCRIPT, "line": 112},
    ])
    for rank in (0, 2):
        ranks[rank]["state"] = "waiting"
    ranks[0].update(state="failed", exit_code=1)
    ranks[3]["state"] = "waiting"
    ranks[3]["current"].update(seq=4, op="broadcast", shapes=[[16]], group="1")
    report["waits"] = [
        {"rank": 0, "waits_for": [1], "group": "0", "seq": 57, "op": "all_reduce"},
        {"rank": 2, "waits_for": [1], "group": "0", "seq": 57, "op": "all_reduce"},
        {"rank": 3, "waits_for": [2], "group": "1", "seq": 4, "op": "broadcast"},
    ]
    report["findings"] = [
        {"kind": "missing_collective", "severity": "error", "ranks": [1], "seq": 57,
         "summary": "rank 0 waits for rank 1 in all_reduce #57; rank 1 is computing at eval.py:88 "
                    "`score = evaluate(model)`",
         "detail": "Ranks 0 and 2 entered all_reduce #57 of group 0; rank 1 never did: its stack "
                   "shows it in evaluate (eval.py:88), its CPU time advancing.",
         "fix": "Give the process group a timeout longer than rank 1's evaluation, or shard the "
                "evaluation evenly.",
         "evidence": {"group": "0", "seq": 57}, "caused_by": None},
        {"kind": "rank_failed", "severity": "info", "ranks": [0], "seq": 57,
         "summary": "rank 0 failed: gloo timed out after 4 s waiting for rank 1 (a consequence)",
         "detail": "RuntimeError: [gloo] Timed out waiting 4000ms for recv operation to complete",
         "fix": "", "evidence": {}, "caused_by": 0},
        {"kind": "rank_failed", "severity": "info", "ranks": [2], "seq": 57,
         "summary": "rank 2 failed: connection closed by rank 0 (a consequence)",
         "detail": "", "fix": "", "evidence": {}, "caused_by": 1},
    ]
    return report


def make_deadlock_report() -> dict[str, Any]:
    """Two ranks in a lock-order deadlock over groups 1 and 2."""
    report = make_hang_report(world_size=2, culprit=1, hang_seq=3)
    report["waits"] = [
        {"rank": 0, "waits_for": [1], "group": "1", "seq": 0, "op": "all_reduce"},
        {"rank": 1, "waits_for": [0], "group": "2", "seq": 0, "op": "all_reduce"},
    ]
    return report
