"""One factory for torch flight recorder dumps, as torch 2.13 writes them on gloo."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def entry(seq: int, op: str = "all_reduce", sizes: list | None = None, dtype: str = "Float",
          retired: bool = True, pg: str = "0", backend: str = "gloo", **extra: Any) -> dict:
    """One entry as torch 2.13 writes it on gloo (state stays "scheduled")."""
    sizes = [[10]] if sizes is None else sizes
    return {"collective_seq_id": seq, "p2p_seq_id": 0, "is_p2p": False, "op_id": seq,
            "profiling_name": f"{backend}:{op}", "input_sizes": sizes, "output_sizes": sizes,
            "input_dtypes": [dtype] * len(sizes), "output_dtypes": [dtype] * len(sizes),
            "pg_id": int(pg), "process_group": [pg, "default_pg"], "record_id": seq - 1,
            "retired": retired, "state": "scheduled", "time_created_ns": 1_000 * seq,
            "time_discovered_started_ns": 0, "time_discovered_completed_ns": 0,
            "timeout_ms": 1800000, **extra}


def write_dump(directory: Path, rank: int, entries: list[dict], completed: int,
               name: str | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    data = {"version": "2.10", "comm_lib_version": "", "nccl_comm_state": {},
            "pg_config": {"": {"desc": "", "name": "", "ranks": "[0, 1]"}},
            "pg_status": {"0": {"last_completed_collective": str(completed),
                                "last_enqueued_collective": str(len(entries)),
                                "last_started_collective": "-1"}},
            "entries": entries}
    path = directory / (name or f"fr-{rank}.json")
    path.write_text(json.dumps(data))
    return path
