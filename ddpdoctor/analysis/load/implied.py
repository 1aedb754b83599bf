"""Calls a rank is inside that no record shows, read from its stack.

torch's DDP reducer issues some collectives from C++, on the DDP's process group, where no
Python wrapper sees them: on the first forward after the first synchronised backward,
``_pre_forward`` rebuilds the gradient buckets and broadcasts their order from rank 0.
A rank blocked there looks idle ("blocked in futex outside any collective") while it is in
fact inside a collective that its peers must enter too.  When the rank's captured stack
ends in DDP's ``_pre_forward`` and no recorded call is open, the call is added to its
calls: a broadcast of DDP's forward, at the next seq of the group of its DDP buckets, at
the user's line that called the model.  Nothing is implied without a stack (a live job,
a rank whose stack could not be taken).
"""

from __future__ import annotations

from ddpdoctor.analysis.load.frames import ddpdoctor_frame, user_frame
from ddpdoctor.analysis.model import Call, RankRun
from ddpdoctor.trace.origin import Origin

DDP_FILE = "torch/nn/parallel/distributed.py"
REDUCER_FORWARD = "_pre_forward"  # DDP's method that calls reducer._rebuild_buckets()


def _innermost_torch_frame(run: RankRun) -> dict | None:
    """The innermost frame of the rank's stack outside ddpdoctor (py-spy's first)."""
    for frame in run.stack or []:
        if not ddpdoctor_frame(str(frame.get("filename", ""))):
            return frame
    return None


def _name(frame: dict) -> str:
    """A frame's function without its class (py-spy gives ``Class.method``)."""
    return str(frame.get("name") or "").rpartition(".")[2]


def reducer_call(run: RankRun) -> Call | None:
    """The reducer's own collective the rank is blocked in, per its stack, else None."""
    if run.open_call() is not None or not run.stack:
        return None
    top = _innermost_torch_frame(run)
    if top is None or _name(top) != REDUCER_FORWARD or \
            not str(top.get("filename", "")).replace("\\", "/").endswith(DDP_FILE):
        return None
    buckets = [c for calls in run.calls.values() for c in calls
               if c.origin == Origin.DDP_BACKWARD]
    if not buckets:
        return None  # no synchronised backward yet: the reducer has nothing to rebuild
    group = buckets[-1].group
    calls = run.calls.get(group, [])
    site, _ = user_frame(run)
    last = max((c.t_end or c.t_start for cs in run.calls.values() for c in cs), default=0)
    return Call(rank=run.rank, group=group, group_index=buckets[-1].group_index,
                seq=(calls[-1].seq + 1) if calls else 1, op="broadcast", peer=0,
                callsite=site or "", framework_site=f"{DDP_FILE}:{top.get('line')}",
                origin=Origin.DDP_FORWARD, t_start=last, t_end=0, index=-1,
                iteration=calls[-1].iteration if calls else -1)


def add_reducer_call(run: RankRun) -> None:
    """Append to the rank's calls the reducer collective its stack shows it inside."""
    call = reducer_call(run)
    if call is not None:
        run.calls.setdefault(call.group, []).append(call)
