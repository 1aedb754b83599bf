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
