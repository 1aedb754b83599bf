"""Fact extraction: each rank's typed state from its trace, exit, stack and progress."""

from __future__ import annotations

import os
import re
import signal
from dataclasses import replace

from ddpdoctor.analysis.model import Call, JobView, RankRun
from ddpdoctor.analysis.load.frames import (INTERNAL_PARTS, ddpdoctor_frame, user_frame,
                                           without_own_frames)
from ddpdoctor.analysis.load.fr_dumps import dumps_alone
from ddpdoctor.analysis.load.peer_errors import PEER_GONE, peer_absence
from ddpdoctor.analysis.causal.state import Death, RankState, StateKind
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.meta_line import traceback_frames
from ddpdoctor.trace.record import CallRecord

FATAL_SIGNAL = re.compile(r"Fatal Python error: (\w+)")
# torch's wrapping of an error raised in a future's callback (a DDP comm hook's, above all):
# "RuntimeError: Got the following error when running the callback: <type>: <message>"
CALLBACK_WRAP = re.compile(r"^RuntimeError: Got the following error when running the "
                           r"callback: (?=[\w.]+: )")
# a DataLoader worker's error, as the main process re-raises it (torch/_utils.py's wrapper)
WORKER_WRAP = re.compile(r"^\w+: Caught \w+ in DataLoader worker process (\d+)")
WORKER_FRAME = re.compile(r'File "([^"]+)", line (\d+)')
LOADER_FUNCS = ("__next__", "_next_data", "fetch", "_get_data", "_try_get_data")
TEARDOWN_WORDS = ("destroy_process_group", "Py_Finalize", "_shutdown", "atexit",
                  "terminate called without an active exception")


def in_data_loading(run: RankRun) -> bool:
    return any("torch/utils/data" in str(f.get("filename", "")) and
               f.get("name") in LOADER_FUNCS for f in run.stack or [])


def stop_time(job: JobView) -> int | None:
    """When ddpdoctor stopped the job (its ``stop`` event), else None."""
    return next((e.get("t") for e in job.supervisor_events if e.get("event") == "stop"),
                None)


def _stop_of(run: RankRun, job: JobView) -> int | None:
    """When ddpdoctor stopped this rank's node, on the rank's own clock: the stop event of
    its own run dir; a rank built without one (tests, attach) falls back on the job's,
    moved onto its node's clock when it ran on another node (by the skew node 0 measured;
    with none measured, another node's stop says nothing of this rank's clock)."""
    if run.stop_ns is not None:
        return run.stop_ns
    stop = stop_time(job)
    node = job.nodes.get(str(run.header.host or ""))
    if stop is None or node is None:
        return stop
    return stop + node.skew_ns if node.skew_ns is not None else None


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def failed_call(run: RankRun) -> Call | None:
    """The call the rank is inside, or the newest one that raised."""
    open_call = run.open_call()
    if open_call is not None:
        return open_call
    failed = [c for calls in run.calls.values() for c in calls[-4:]
              if c.flags & L.RecordFlag.FAILED]
    failed += [c for c in run.p2p[-16:] if c.flags & L.RecordFlag.FAILED]
    return max(failed, key=lambda c: c.t_start) if failed else None


def _exception_death(run: RankRun, exc: dict) -> Death:
    frames = [f for f in traceback_frames(exc) if
              not ddpdoctor_frame(str(f.get("filename", "")))]
    user = [f for f in frames
            if not any(p in str(f.get("filename", "")) for p in INTERNAL_PARTS)]
    last = (user or frames or [{}])[-1]
    where = (f"{os.path.basename(str(last.get('filename', '?')))}:{last.get('line', '?')}"
             if last else "")
    msg = CALLBACK_WRAP.sub("", f"{exc.get('type', 'Exception')}: {exc.get('message', '')}"
                            .strip())
    first_line = msg.splitlines()[0] if msg else "an exception"
    worker = WORKER_WRAP.match(first_line)
    if worker and "Original Traceback" in msg:  # the worker's own error, not the wrapper's
        lines = msg.splitlines()
        first_line = next((x.strip() for x in reversed(lines) if x.strip()), first_line) + \
            f" (in DataLoader worker process {worker.group(1)})"
        inner = [m for m in WORKER_FRAME.finditer(msg)
                 if not any(p in m.group(1) for p in INTERNAL_PARTS)]
        if inner:
            where = f"{os.path.basename(inner[-1].group(1))}:{inner[-1].group(2)}"
    tb = "\n".join(f"  {f.get('filename')}:{f.get('line')} in {f.get('name')}"
                   for f in frames[-8:] if isinstance(f, dict))
    return Death(first_line[:300], int(exc.get("t") or run.header.heartbeat_ns), where,
                 f"Traceback (innermost last):\n{tb}\n{msg[:1500]}", None,
                 peer_absence(msg) and _raised_by_torch(exc) and
                 (failed_call(run) is not None or bool(PEER_GONE.search(msg))))


def _raised_by_torch(exc: dict) -> bool:
    """Was the error raised inside torch (a collective, the store) or ddpdoctor's ring,
    rather than by the rank's own code or another library?  Only such an error can tell
    a peer's absence: a user's `TimeoutError` or an HTTP client's "reset by peer" is the
    rank's own failure.  Without a traceback, the text decides."""
    frames = [f for f in traceback_frames(exc) if isinstance(f, dict)]
    if not frames:
        return True
    name = str(frames[-1].get("filename", ""))
    return ddpdoctor_frame(name) or "/torch/" in name.replace("\\", "/")


def death_of(run: RankRun, stop_ns: int | None) -> Death | None:
    """How ``run`` died, or None if it is alive, exited cleanly, or was stopped by ddpdoctor."""
    h = run.header
    exc = run.exception()
    if exc is not None and stop_ns is not None and int(exc.get("t") or 0) >= stop_ns:
        return None  # raised while ddpdoctor stopped the job (e.g. KeyboardInterrupt)
    if exc is None and stop_ns is not None and (run.gone_at_ns is None or
                                                run.gone_at_ns >= stop_ns):
        return None  # still alive when ddpdoctor stopped the job: ended by the stop
    if exc is not None:
        return _exception_death(run, exc)
    inside = failed_call(run)
    last = _last_call(run)
    last_op = last.op if last is not None and inside is None else ""
    if run.fault:
        m = FATAL_SIGNAL.search(run.fault)
        name = {"Aborted": "SIGABRT", "Segmentation": "SIGSEGV"}.get(
            m.group(1) if m else "", m.group(1) if m else "a fatal signal")
        return Death(f"killed by {name} (no Python exception)", h.heartbeat_ns, "",
                     f"faulthandler's dump:\n{without_own_frames(run.fault)[:3000]}", name,
                     name == "SIGABRT" and inside is not None,
                     name == "SIGABRT" and inside is None and _in_teardown(run),
                     last_op=last_op)
    rc = run.returncode
    at = int(run.gone_at_ns or h.heartbeat_ns)
    if run.exited_cleanly():
        return None  # its program returned; a launcher's signal only cut teardown short
    if rc is not None and rc < 0:
        name = _signal_name(-rc)
        return Death(f"killed by {name}", at, "",
                     f"The launcher saw rank {run.rank} (pid {run.pid}) end with signal "
                     f"{-rc} ({name}); a signal leaves no Python traceback.", name,
                     name == "SIGTERM" or (name == "SIGABRT" and inside is not None),
                     name == "SIGABRT" and inside is None and _in_teardown(run),
                     last_op=last_op)
    if rc is not None and rc > 0 and not run.exited_cleanly():
        return Death(f"exited with status {rc}", at, "",
                     f"Rank {run.rank} (pid {run.pid}) exited with status {rc}.")
    if (run.alive is False or rc is not None) and h.state.name not in ("EXITED", "FAILED"):
        return Death("vanished without an exception or exit (killed, e.g. SIGKILL or the "
                     "OOM killer)", at, "",
                     f"Rank {run.rank} (pid {run.pid}) disappeared while "
                     f"{h.state.name.lower().replace('_', ' ')}; nothing ran at its exit, "
                     "which only SIGKILL (or a hard crash) does.", "SIGKILL")
    return None


def _in_teardown(run: RankRun) -> bool:
    """Did the rank die after its last call returned, in destroy_process_group or at exit?"""
    return _on_its_way_out(run) or bool(run.calls)


def _on_its_way_out(run: RankRun) -> bool:
    """Evidence that the rank was leaving: destroy_process_group, its exit, or teardown
    words in its fault dump."""
    if any(m.op == "destroy" for m in run.marks) or run.trace.meta_events("destroy") or \
            run.header.state == L.RankState.EXITED:
        return True
    return any(w in run.fault for w in TEARDOWN_WORDS)


def _open_mark(run: RankRun) -> CallRecord | None:
    opened = [m for m in run.marks if m.open and m.op in ("init", "new_group")]
    return opened[-1] if opened else None


def os_wait_of(run: RankRun, job: JobView) -> dict | None:
    """What the OS said the idle rank waits on (the supervisor's newest ``os_wait`` event
    for its pid), unless the rank recorded a call since or its CPU time advances."""
    if run.cpu_busy:
        return None
    said = [e for e in job.supervisor_events
            if e.get("event") == "os_wait" and e.get("pid") == run.pid]
    if not said:
        return None
    last = _last_call(run)
    newest = said[-1]
    since = max((last.t_end or last.t_start) if last is not None else 0,
                max((m.t_start for m in run.marks), default=0))
    return newest if int(newest.get("t") or 0) >= since else None


def _holder(wait: dict | None, job: JobView) -> int | None:
    """The rank whose process holds the lock the rank waits for, if one of the job's."""
    pid = (wait or {}).get("holder_pid")
    return next((r for r, run in job.ranks.items() if run.pid == pid), None) \
        if isinstance(pid, int) else None


def _meaning(wait: dict | None, job: JobView) -> str:
    """What the OS wait means, with the lock's holder by rank where it is one of the job's."""
    if not wait:
        return ""
    meaning = str(wait.get("meaning") or "")
    holder, pid = _holder(wait, job), wait.get("holder_pid")
    if holder is not None:
        meaning += f" held by rank {holder}"
    elif isinstance(pid, int):
        meaning += f" held by pid {pid}"
    return meaning


def rank_state(run: RankRun, job: JobView, stop_ns: int | None) -> RankState:
    """The typed state of one rank (see StateKind)."""
    frame, name = user_frame(run)
    wait = os_wait_of(run, job)
    base = RankState(run.rank, StateKind.COMPUTING, _last_call(run), frame=frame,
                     frame_name=name, cpu_busy=run.cpu_busy, progress_ns=run.progress_ns,
                     steps=max(run.header.step, 0),
                     mark_count=sum(1 for m in run.marks if m.op == "new_group"),
                     blocked_on=str((wait or {}).get("syscall") or ""),
                     blocked_meaning=_meaning(wait, job), blocked_by=_holder(wait, job))
    death = death_of(run, stop_ns)
    if death is not None:
        call = failed_call(run)
        return replace(base, kind=StateKind.PEER_FAILED if death.peer_absence else
                       StateKind.DIED, call=call, since_ns=call.t_start if call else None,
                       death=death)
    if run.exited_cleanly():
        return replace(base, kind=StateKind.EXITED)
    node = job.nodes.get(str(run.header.host or ""))
    if node is not None and node.lost:
        return replace(base, kind=StateKind.UNREACHABLE, since_ns=node.lost_at_ns)
    if run.proc_state == "T":
        return replace(base, kind=StateKind.STOPPED)
    mark = _open_mark(run)
    if mark is not None:
        return replace(base, kind=StateKind.RENDEZVOUS, call=None, since_ns=mark.t_start,
                       mark=mark.op)
    if run.header.state == L.RankState.STARTING and not run.calls and \
            not any(m.op == "init" for m in run.marks):
        return replace(base, kind=StateKind.NOT_ARRIVED)
    call = run.open_call()
    if call is not None:
        return replace(base, kind=StateKind.BLOCKED, call=call, since_ns=call.t_start)
    if in_data_loading(run):
        return replace(base, kind=StateKind.DATA_LOADING)
    if base.blocked_on:
        return replace(base, kind=StateKind.OS_BLOCKED)
    if dumps_alone(run):
        return replace(base, kind=StateKind.UNSEEN)
    return base


def _last_call(run: RankRun) -> Call | None:
    calls = [c[-1] for c in run.calls.values() if c] + run.p2p[-1:]
    return max(calls, key=lambda c: c.t_start) if calls else None


def state_of(run: RankRun, job: JobView) -> RankState:
    """One rank's typed state by itself (what rank_states gives it, less the teardown
    reading, which compares it with its peers): the report's shown state starts here."""
    return rank_state(run, job, _stop_of(run, job))


def rank_states(job: JobView) -> dict[int, RankState]:
    """Every rank of the world: its state; a rank with no trace has not arrived."""
    states = {r: rank_state(run, job, _stop_of(run, job)) for r, run in job.ranks.items()}
    members = {m for g in job.groups() for m in job.group_members(g)}
    missing = StateKind.UNSEEN if job.dumps_alone else StateKind.NOT_ARRIVED
    for r in set(range(job.world_size)) | members:
        states.setdefault(r, RankState(r, missing))  # (dumps alone: its dump is missing)
    for r, s in states.items():
        if s.death is not None and s.death.teardown and _behind(job.ranks[r], job):
            states[r] = replace(s, death=replace(s.death, teardown=False,
                                                 left_early=_on_its_way_out(job.ranks[r])))
    return dict(sorted(states.items()))


def _behind(run: RankRun, job: JobView) -> bool:
    """Did a peer make collectives on a shared group past this rank's last one?"""
    for group, calls in run.calls.items():
        mine = calls[-1].seq if calls else -1
        for other in job.ranks.values():
            theirs = other.last_call(group)
            if other is not run and theirs is not None and theirs.seq > mine:
                return True
    return False
