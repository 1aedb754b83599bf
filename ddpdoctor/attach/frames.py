"""Tell from a rank's py-spy frames which collective it is in, and the user's call site."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ddpdoctor.trace import layout as L

C10D_FILES = ("distributed_c10d.py",)
# torch.distributed functions a rank can block in, as py-spy names their frames
COLLECTIVES = frozenset((
    "all_reduce", "all_reduce_coalesced", "all_gather", "all_gather_into_tensor",
    "all_gather_coalesced", "_all_gather_base", "all_gather_object", "reduce_scatter",
    "reduce_scatter_tensor", "_reduce_scatter_base", "all_to_all", "all_to_all_single",
    "broadcast", "broadcast_object_list", "reduce", "gather", "gather_object", "scatter",
    "scatter_object_list", "barrier", "monitored_barrier"))
P2P = frozenset(("send", "recv", "isend", "irecv", "batch_isend_irecv", "send_object_list",
                 "recv_object_list"))
RENDEZVOUS = frozenset(("init_process_group", "new_group", "new_subgroups"))
# The autograd engine's entry frames: a rank held there is in a backward pass, whose DDP
# reducer all-reduces the gradients (the engine waits on the comm hook's future in C++).
BACKWARD_FRAMES = frozenset((("torch/autograd/graph.py", "_engine_run_backward"),
                             ("torch/autograd/__init__.py", "backward"),
                             ("torch/_tensor.py", "backward")))
DDP_BACKWARD_OP = "all_reduce"
# Frames of these files are never the user's code.
INTERNAL_PARTS = ("/site-packages/", "/dist-packages/", "/torch/", "/ddpdoctor/",
                  "/lib/python3", "<frozen ", "<string>")


@dataclass(frozen=True)
class StackPlace:
    """Where one stack sample finds a rank.

    op: the torch.distributed function it is inside (outermost one), or "" when it is in
    none.  kind: COLLECTIVE, P2P or MARK (init_process_group / new_group).  callsite: the
    user's innermost frame as ``path:line`` ("" when none).  framework_site: the innermost
    framework or torch frame between the user and ``op`` ("" when the user called torch
    directly).  function: the user's function at the call site.
    """

    op: str
    kind: L.RecordKind
    callsite: str
    framework_site: str
    function: str

    @property
    def in_call(self) -> bool:
        return bool(self.op)

    @property
    def in_backward(self) -> bool:
        """Is the rank inside a backward pass (DDP's gradient all-reduce, once it stays
        there without running)?"""
        return self.op == DDP_BACKWARD_OP and _backward_frame(self.framework_site)


def is_user_file(filename: str) -> bool:
    return bool(filename) and not any(p in filename for p in INTERNAL_PARTS)


def _site(frame: dict[str, Any]) -> str:
    return f"{frame.get('filename')}:{frame.get('line')}"


def _c10d_op(frame: dict[str, Any]) -> str | None:
    name = str(frame.get("name") or "").rsplit(".", 1)[-1]
    if not str(frame.get("filename") or "").endswith(C10D_FILES):
        return None
    return name if name in COLLECTIVES or name in P2P or name in RENDEZVOUS else None


def _backward_frame(site: str) -> bool:
    path = site.rpartition(":")[0].replace("\\", "/")
    return any(path.endswith(f) for f, _ in BACKWARD_FRAMES)


def _backward_index(frames: list[dict[str, Any]], before: int) -> int:
    """The outermost autograd-engine frame inside the user's (index), else -1."""
    found = -1
    for i, frame in enumerate(frames[:before] if before >= 0 else frames):
        path = str(frame.get("filename") or "").replace("\\", "/")
        name = str(frame.get("name") or "").rsplit(".", 1)[-1]
        if any(path.endswith(f) and name == n for f, n in BACKWARD_FRAMES):
            found = i
    return found


def place_of(frames: list[dict[str, Any]]) -> StackPlace:
    """Read a main-thread stack (innermost frame first)."""
    op, kind = "", L.RecordKind.COLLECTIVE
    op_index = -1
    user_index = -1
    for i, frame in enumerate(frames):
        name = _c10d_op(frame)
        if name is not None and user_index < 0:
            op, op_index = name, i  # keep going: the outermost c10d call is the user's
            kind = L.RecordKind.P2P if name in P2P else L.RecordKind.MARK \
                if name in RENDEZVOUS else L.RecordKind.COLLECTIVE
        if user_index < 0 and is_user_file(str(frame.get("filename") or "")):
            user_index = i
    if user_index < 0:
        return StackPlace(op, kind, "", "", "")
    user = frames[user_index]
    backward = _backward_index(frames, user_index) if not op else -1
    if backward >= 0:  # in loss.backward(): where DDP's reducer all-reduces the gradients
        return StackPlace(DDP_BACKWARD_OP, L.RecordKind.COLLECTIVE, _site(user),
                          _site(frames[backward]), str(user.get("name") or ""))
    between = [f for f in frames[op_index + 1:user_index]] if op else frames[:user_index]
    framework = next((f for f in between if "/torch/" not in str(f.get("filename"))), None) \
        if op else None
    return StackPlace(op, kind, _site(user), _site(framework) if framework else "",
                      str(user.get("name") or ""))
