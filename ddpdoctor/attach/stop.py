"""Stop a job that attach found: its launcher and every process below it."""

from __future__ import annotations

import os
import signal
import time

from ddpdoctor.attach.discover import RankProcess, descendants, parent_of
from ddpdoctor.proc.table import alive

LAUNCHER_WORDS = ("torchrun", "torch.distributed.run", "torch.distributed.launch")
GRACE_S = 5.0


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def job_roots(ranks: list[RankProcess], given: list[int]) -> list[int]:
    """The processes whose trees make the job: the PIDs given that are no rank (a
    launcher), else the ranks' parent when it is torch's launcher, else the ranks."""
    rank_pids = {r.pid for r in ranks}
    launchers = [p for p in given if p not in rank_pids]
    if launchers:
        return launchers
    parents = {parent_of(r.pid) for r in ranks}
    agents = [p for p in parents if p and p > 1 and
              any(w in _cmdline(p) for w in LAUNCHER_WORDS)]
    return agents or sorted(rank_pids)


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            continue  # gone already, or not ours to signal: the survivors are reported


def stop_job_tree(roots: list[int], grace: float = GRACE_S) -> list[int]:
    """SIGCONT then SIGTERM every process of the roots' trees, SIGKILL what is left after
    ``grace`` seconds.  Returns the pids still alive at the end (none, normally)."""
    tree = list(dict.fromkeys(roots + [d for r in roots for d in descendants(r)]))
    _signal(tree, signal.SIGCONT)  # a stopped process cannot act on SIGTERM
    _signal(tree, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(p) for p in tree):
        time.sleep(0.1)
    _signal([p for p in tree if alive(p)], signal.SIGKILL)
    time.sleep(0.2)
    return [p for p in tree if alive(p)]
