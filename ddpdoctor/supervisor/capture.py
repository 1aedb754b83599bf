"""What the supervisor takes of a job's live ranks before a verdict is written: their torch
flight recorder dumps, TCP connections and py-spy stacks, under the run dir."""

from __future__ import annotations

import time
from pathlib import Path

from ddpdoctor.supervisor.connections import capture_connections
from ddpdoctor.supervisor.events import Log
from ddpdoctor.supervisor.flight_recorder import request_dumps, wait_for_dumps
from ddpdoctor.supervisor.stacks import capture_stacks
from ddpdoctor.supervisor.watch import LiveRank


def capture_ranks(run_dir: Path, ranks: dict[int, LiveRank], why: str, log: Log) -> None:
    """Everything of the live ``ranks`` (rank -> its live trace) at a verdict or a failure:
    the dumps are asked first (ranks dump while py-spy samples them), then the connections
    (the kernel's idle times as at the verdict), the stacks, and the wait for the dumps
    (only a rank that ran a collective has a process group, so a dump to wait for)."""
    pids = [p.header.pid for p in ranks.values()]
    grouped = [r for r, p in ranks.items() if p.hi or p.groups]
    t0 = time.monotonic()
    asked = request_dumps(run_dir)
    logged_connections(pids, run_dir, log)
    capture_stacks(pids, run_dir / "stacks")
    log("stacks", why=why, pids=pids, seconds=round(time.monotonic() - t0, 3))
    missing = wait_for_dumps(run_dir, grouped, asked)
    log("flight_recorder", ranks=sorted(set(grouped) - set(missing)), missing=missing,
        seconds=round(time.monotonic() - t0, 3))


def logged_connections(pids: list[int], run_dir: Path, log: Log) -> None:
    """The ranks' TCP connections, written beside their stacks, and a ``sockets`` event."""
    try:
        found = capture_connections(pids, run_dir / "stacks")
    except Exception as e:  # noqa: BLE001 - the report goes on without them
        log("sockets", error=f"{type(e).__name__}: {e}")
        return
    log("sockets", pids=pids, sockets=sum(len(c.sockets) for c in found.values()),
        errors={str(p): c.error for p, c in found.items() if c.error})
