"""rank_failed: a rank died (exception, fatal signal, kill) while the others ran or waited."""

from __future__ import annotations

import os
import re
import signal
from dataclasses import dataclass

from ddpdoctor.analysis.model import NS, Finding, JobView, RankRun, Severity

# Errors a rank gets because a peer died: symptoms, not root causes.
PEER_SYMPTOM = re.compile(
    r"Connection (closed|reset) by peer|Broken pipe|Connection refused|"
    r"Socket Timeout|Timed out|timed out|ProcessGroupGloo.*(closed|abort)|"
    r"NCCL communicator was aborted|Rank \d+ is not|peer|recvBytes|sendBytes", re.IGNORECASE)
FATAL_SIGNAL = re.compile(r"Fatal Python error: (\w+)")


@dataclass(frozen=True)
class Failure:
    """How one rank died: ``cause`` is a one-line quote, ``symptom`` True when it is a
    consequence of a peer's death."""

    rank: int
    cause: str
    at_ns: int
    symptom: bool
    where: str
    detail: str
    signal_name: str | None = None


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def stop_time(job: JobView) -> int | None:
    return next((e.get("t") for e in job.supervisor_events if e.get("event") == "stop"),
                None)


def failure_of(run: RankRun, stop_ns: int | None) -> Failure | None:
    """The failure of ``run``, or None if it is alive, exited cleanly, or was stopped by
    ddpdoctor itself."""
    h = run.header
    exc = run.exception()
    if exc is not None and stop_ns is not None and int(exc.get("t") or 0) >= stop_ns:
        return None  # raised while ddpdoctor stopped the job (e.g. KeyboardInterrupt)
    if exc is None and stop_ns is not None and (run.gone_at_ns is None or
                                                run.gone_at_ns >= stop_ns):
        return None  # still alive when ddpdoctor stopped the job: ended by the stop
    if exc is not None:
        frames = exc.get("traceback") or []
        user = [f for f in frames if isinstance(f, dict)
                and "site-packages" not in str(f.get("filename", ""))]
        last = (user or frames or [{}])[-1]
        where = (f"{os.path.basename(str(last.get('filename', '?')))}:{last.get('line', '?')}"
                 if last else "")
        msg = f"{exc.get('type', 'Exception')}: {exc.get('message', '')}".strip()
        first_line = msg.splitlines()[0] if msg else "an exception"
        tb = "\n".join(f"  {f.get('filename')}:{f.get('line')} in {f.get('name')}"
                       for f in frames[-8:] if isinstance(f, dict))
        return Failure(run.rank, first_line[:300], int(exc.get("t") or h.heartbeat_ns),
                       bool(PEER_SYMPTOM.search(msg)), where,
                       f"Traceback (innermost last):\n{tb}\n{msg[:1500]}")
    if run.fault:
        m = FATAL_SIGNAL.search(run.fault)
        name = {"Aborted": "SIGABRT", "Segmentation": "SIGSEGV"}.get(
            m.group(1) if m else "", m.group(1) if m else "a fatal signal")
        return Failure(run.rank, f"killed by {name} (no Python exception)",
                       h.heartbeat_ns, False, "", f"faulthandler's dump:\n{run.fault[:3000]}",
                       name)
    rc = run.returncode
    gone = run.alive is False or rc is not None
    at = int(run.gone_at_ns or h.heartbeat_ns)
    if rc is not None and rc < 0:
        name = _signal_name(-rc)
        return Failure(run.rank, f"killed by {name}", at, name == "SIGTERM", "",
                       f"The launcher saw rank {run.rank} (pid {run.pid}) end with signal "
                       f"{-rc} ({name}); a signal leaves no Python traceback.", name)
    if rc is not None and rc > 0 and not run.exited_cleanly():
        return Failure(run.rank, f"exited with status {rc}", at, False, "",
                       f"Rank {run.rank} (pid {run.pid}) exited with status {rc}.")
    if gone and h.state.name not in ("EXITED", "FAILED"):
        return Failure(run.rank, "vanished without an exception or exit (killed, e.g. "
                       "SIGKILL or the OOM killer)", at, False, "",
                       f"Rank {run.rank} (pid {run.pid}) disappeared while "
                       f"{h.state.name.lower().replace('_', ' ')}; nothing ran at its exit, "
                       "which only SIGKILL (or a hard crash) does.")
    return None


def detect(job: JobView) -> list[Finding]:
    stop_ns = stop_time(job)
    failures = [f for f in (failure_of(run, stop_ns) for run in job.ranks.values()) if f]
    if not failures:
        return []
    roots = [f for f in failures if not f.symptom] or failures
    first = min(roots, key=lambda f: f.at_ns)
    # ranks that failed the same way at about the same time share one finding
    same = [f for f in roots if f.cause == first.cause and abs(f.at_ns - first.at_ns) < 5 * NS]
    ranks = tuple(sorted(f.rank for f in same))
    others = [f for f in failures if f.rank not in ranks]
    run = job.ranks[first.rank]
    open_call = run.open_call()
    during = (f" while inside {open_call.describe()} (seq {open_call.seq})"
              if open_call else f" at step {run.header.step}" if run.header.step >= 0 else "")
    who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"
    where = f" at {first.where}" if first.where else ""
    summary = f"{who} failed{where}: {first.cause}"
    detail = first.detail + (f"\nIt was{during}." if during else "")
    if others:
        detail += "\nThen: " + "; ".join(f"rank {f.rank} {f.cause}" for f in
                                          sorted(others, key=lambda f: f.at_ns)) + \
                  " (consequences of the first failure)."
    fix = ("Fix the error on the failing rank (see its traceback); the other ranks' errors "
           "are consequences.")
    if first.signal_name in ("SIGKILL", None) and "vanished" in first.cause:
        fix = ("Find who killed the rank: check `dmesg` for the OOM killer and the "
               "scheduler's logs; reduce memory per rank if it is the OOM killer.")
    elif first.signal_name == "SIGABRT":
        fix = ("A SIGABRT from gloo usually means mismatched collectives (see any "
               "collective_mismatch finding) or a process that exited without "
               "destroy_process_group; check the ranks' sequences.")
    evidence = {"failures": [{"rank": f.rank, "cause": f.cause, "at_ns": f.at_ns,
                              "symptom": f.symptom, "signal": f.signal_name}
                             for f in sorted(failures, key=lambda f: f.at_ns)],
                "pid": run.pid}
    seq = open_call.seq if open_call else None
    return [Finding("rank_failed", Severity.ERROR, ranks, seq, summary, detail, fix, evidence)]
