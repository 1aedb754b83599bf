"""What the supervisor takes of a job's live ranks before a verdict is written: their torch
flight recorder dumps, TCP connections and py-spy stacks, under the run dir.

The connections go beside the rank's stack, as ``stacks/pid-<pid>.sockets.json``: a node
other than node 0 copies its stacks dir to node 0 with the rest of its run dir, so the
analysis sees both ends of every connection between the hosts (proc/sockets.py says what
is captured).  The dumps are asked through a file every rank watches."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from ddpdoctor.proc.sockets import SOCKETS_FILE, NamespaceTables, SocketCapture, capture
from ddpdoctor.proc.table import descendants, scan
from ddpdoctor.rundir.layout import write_bytes_atomic, write_json_atomic
from ddpdoctor.rundir.safe_path import make_dirs
from ddpdoctor.supervisor.stacks import capture_stacks
from ddpdoctor.supervisor.watch import LiveRank
from ddpdoctor.trace import fr_files

DUMPS_WAIT_S = 2.0  # ranks poll every 0.5 s; a dump of a few thousand entries takes ms


def capture_ranks(run_dir: Path, ranks: dict[int, LiveRank], why: str,
                  log: Callable[..., None]) -> None:
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
    children = capture_children(pids, run_dir / "stacks")
    log("stacks", why=why, pids=pids, children=sorted(children),
        seconds=round(time.monotonic() - t0, 3))
    missing = wait_for_dumps(run_dir, grouped, asked)
    log("flight_recorder", ranks=sorted(set(grouped) - set(missing)), missing=missing,
        seconds=round(time.monotonic() - t0, 3))


def capture_pids(run_dir: Path, pids: list[int], why: str, log: Callable[..., None]) -> None:
    """The stacks of some ranks (``why``: a straggler, the ranks others wait on, node 0's
    ask), and a ``stacks`` event."""
    if pids:
        capture_stacks(pids, run_dir / "stacks")
        children = capture_children(pids, run_dir / "stacks")
        log("stacks", why=why, pids=pids, children=sorted(children))


MAX_CHILDREN = 32  # a rank's child processes whose stacks are taken (its DataLoader workers)


def capture_children(pids: list[int], stacks_dir: Path) -> dict[int, int]:
    """The stacks of the ranks' child processes (DataLoader workers, a subprocess it waits
    on), each marked with its rank's pid: a rank held in its loader waits on one of them.
    Returns child pid -> rank pid."""
    table = scan()
    parents: dict[int, int] = {}
    for pid in pids:
        for child in sorted(descendants(table, [pid]))[:MAX_CHILDREN]:
            parents.setdefault(child, pid)
    if parents:
        capture_stacks(sorted(parents), stacks_dir, parents)
    return parents


def logged_connections(pids: list[int], run_dir: Path, log: Callable[..., None]) -> None:
    """The ranks' TCP connections, written beside their stacks, and a ``sockets`` event."""
    try:
        found = capture_connections(pids, run_dir / "stacks")
    except Exception as e:  # noqa: BLE001 - the report goes on without them
        log("sockets", error=f"{type(e).__name__}: {e}")
        return
    log("sockets", pids=pids, sockets=sum(len(c.sockets) for c in found.values()),
        errors={str(p): c.error for p, c in found.items() if c.error})


def capture_connections(pids: list[int], stacks_dir: Path) -> dict[int, SocketCapture]:
    """Each pid's TCP sockets now, each also written to stacks/pid-<pid>.sockets.json (a
    namespace's table is read once for all the pids in it)."""
    tables = NamespaceTables()
    results: dict[int, SocketCapture] = {}
    for pid in pids:
        found = results[pid] = capture(pid, tables)
        try:
            make_dirs(stacks_dir)
            write_json_atomic(stacks_dir / SOCKETS_FILE.format(pid=pid), found.to_dict())
        except OSError:
            continue  # the run dir is not writable: the stacks' capture says so
    return results


def request_dumps(run_dir: Path) -> float:
    """Touch the request file every rank watches; returns the request's time."""
    path = fr_files.request_path(run_dir)
    make_dirs(path.parent)
    write_bytes_atomic(path, f"{time.time_ns()}\n".encode())
    return path.stat().st_mtime


def wait_for_dumps(run_dir: Path, ranks: list[int], since: float,
                   timeout: float = DUMPS_WAIT_S) -> list[int]:
    """Wait until every rank in ``ranks`` wrote a dump newer than ``since``; returns the
    ranks whose dump is missing when ``timeout`` runs out."""
    deadline = time.monotonic() + timeout
    while True:
        missing = []
        for rank in ranks:
            try:
                fresh = fr_files.dump_path(run_dir, rank).stat().st_mtime >= since
            except OSError:
                fresh = False
            if not fresh:
                missing.append(rank)
        if not missing or time.monotonic() >= deadline:
            return missing
        time.sleep(0.1)
