"""Stop a job that attach found: its launcher and every process below it."""

from __future__ import annotations

from ddpdoctor.attach.discover import RankProcess, parent_of
from ddpdoctor.proc.control import JobTree, StopResult, stop_tree

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


def stop_job_tree(roots: list[int], grace: float = GRACE_S) -> StopResult:
    """SIGCONT then SIGTERM every process of the roots' trees, SIGKILL what is left after
    ``grace`` seconds.  Returns what was done (``survivors``: none, normally)."""
    return stop_tree(JobTree(tuple(roots), session=False), grace)


def stopped_text(result: StopResult) -> str:
    """``stopped the job: SIGTERM to pids 10, 11, 12; SIGKILL to 12 (alive after 5 s)``."""
    text = f"stopped the job: {result.signal} to pid{'s' if len(result.pids) != 1 else ''} " \
        f"{', '.join(map(str, result.pids)) or '(none left)'}"
    if result.killed:
        text += f"; SIGKILL to {', '.join(map(str, result.killed))} (alive after " \
            f"{GRACE_S:.0f} s)"
    return text
