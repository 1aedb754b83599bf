"""Find the rank processes of a running job on this node from /proc."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ddpdoctor.errors import UserError
from ddpdoctor.proc.table import descendants, proc_info, scan

PROC = Path("/proc")
# What ties ranks into one job: torchrun's run id, else the rendezvous address.
JOB_KEYS = ("TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class RankProcess:
    """One rank of the job as /proc shows it."""

    pid: int
    rank: int
    world_size: int
    local_rank: int
    job_key: tuple[str, ...]  # the JOB_KEYS values: equal for every rank of one job
    env: tuple[tuple[str, str], ...]  # the few variables attach reads (TORCH_FR_*)

    def getenv(self, name: str) -> str | None:
        return dict(self.env).get(name)


def read_environ(pid: int) -> dict[str, str] | None:
    """The process's environment at its start, or None when it cannot be read."""
    try:
        raw = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def rank_process(pid: int) -> RankProcess | None:
    """The rank that ``pid`` is (RANK and WORLD_SIZE in its environment), else None."""
    env = read_environ(pid)
    if env is None:
        return None
    rank, world = _int(env.get("RANK")), _int(env.get("WORLD_SIZE"))
    if rank is None or world is None or not 0 <= rank < world:
        return None
    local = _int(env.get("LOCAL_RANK"))
    kept = tuple((k, v) for k, v in sorted(env.items()) if k.startswith("TORCH_FR_"))
    return RankProcess(pid, rank, world, local if local is not None else rank,
                       tuple(env.get(k, "") for k in JOB_KEYS), kept)


def parent_of(pid: int) -> int | None:
    """The parent pid of ``pid``, or None when it is gone."""
    info = proc_info(pid)
    return info.ppid if info is not None else None


def _is_ours(pid: int) -> bool:
    """ddpdoctor itself and its own ancestors are never ranks of the job."""
    me = os.getpid()
    while pid and pid != 1:
        if pid == me:
            return True
        pid = parent_of(pid) or 0
    return False


def _one_job(found: list[RankProcess], how: str) -> list[RankProcess]:
    jobs: dict[tuple[str, ...], list[RankProcess]] = {}
    for rp in found:
        jobs.setdefault(rp.job_key, []).append(rp)
    if len(jobs) > 1:
        listing = "\n".join(f"  {job_line(rps)}" for rps in jobs.values())
        raise UserError(f"{how} found {len(jobs)} jobs; give the PID of one job's launcher "
                        f"or ranks (ddpdoctor attach PID):\n{listing}")
    pids = {rp.pid for rp in found}
    ranks: dict[int, RankProcess] = {}
    for rp in sorted(found, key=lambda r: r.pid):
        if parent_of(rp.pid) in pids:
            continue  # a rank's own children (data loader workers) inherit its RANK
        ranks.setdefault(rp.rank, rp)
    return [ranks[r] for r in sorted(ranks)]


def command_of(pid: int, most: int = 160) -> str:
    """The command line of ``pid`` as one line (at most ``most`` characters), else ""."""
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return ""
    text = " ".join(a.decode(errors="replace") for a in raw.split(b"\0") if a)
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= most else text[:most - 1] + "…"


def job_line(ranks: list[RankProcess]) -> str:
    """``launcher 120: torchrun --nproc-per-node 2 train.py; ranks 121, 122 (world 2)``:
    one job as attach found it, with the command it was started with."""
    pids = sorted(r.pid for r in ranks)
    parent = parent_of(pids[0])
    launcher = parent if parent and parent > 1 and \
        all(parent_of(p) == parent for p in pids) else None
    shown = f"launcher {launcher}: {command_of(launcher)}; " if launcher else \
        f"{command_of(pids[0])}; "
    return f"{shown}rank pid{'s' if len(pids) > 1 else ''} {', '.join(map(str, pids))} " \
        f"(world {ranks[0].world_size})"


def find_ranks(pids: list[int]) -> list[RankProcess]:
    """The ranks of one job: those among ``pids`` or below them (a torchrun agent's
    children), or with no pids every process with RANK and WORLD_SIZE in its environment.
    Raises UserError when there is no such process or there are several jobs."""
    table = scan()
    everyone = sorted(table)
    if not pids:
        found = [rp for pid in everyone if not _is_ours(pid)
                 and (rp := rank_process(pid)) is not None]
        if not found:
            raise UserError("no running job found on this node (no process with RANK and "
                            "WORLD_SIZE in its environment): give the PID of its launcher "
                            "or ranks")
        return _one_job(found, "attach")
    found = []
    for pid in pids:
        if not (PROC / str(pid)).is_dir():
            raise UserError(f"no process with PID {pid}")
        rp = rank_process(pid)
        if rp is not None:
            found.append(rp)
            continue
        below = [r for p in sorted(descendants(table, [pid]))
                 if (r := rank_process(p)) is not None]
        if not below:
            raise UserError(f"PID {pid} is neither a rank (no RANK and WORLD_SIZE in its "
                            "environment) nor the launcher of any")
        found += below
    return _one_job(found, "the PIDs given")
