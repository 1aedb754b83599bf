"""Capture every live rank's TCP connections (the kernel's state of each) at a verdict.

Written beside the rank's stack, as ``stacks/pid-<pid>.sockets.json``: a node other than
node 0 copies its stacks dir to node 0 with the rest of its run dir, so the analysis sees
both ends of every connection between the hosts (proc/sockets.py says what is captured)."""

from __future__ import annotations

from pathlib import Path

from ddpdoctor.proc.sockets import SOCKETS_FILE, NamespaceTables, SocketCapture, capture
from ddpdoctor.rundir.layout import write_json_atomic
from ddpdoctor.rundir.safe_path import make_dirs


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
