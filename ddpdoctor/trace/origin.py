"""Origin: which API issued a recorded collective (the user's call, DDP, ZeRO, SyncBN, ...).

The recorder walks the frames between torch.distributed and the user's frame once per call
site (runtime/callsites.py) and stores the origin as one letter, the record text's sixth
part; the reader turns it back into an ``Origin``.  A DDP gradient bucket and an object
collective are told by the record itself (its BUCKET flag, its op), not by a stored letter.
"""

from __future__ import annotations

import enum
from typing import Iterable

from ddpdoctor.trace import layout as L


class Origin(str, enum.Enum):
    """The API that issued a collective; USER when the user's own line called torch."""

    USER = "user"
    DDP_FORWARD = "ddp_forward"  # DDP's forward: buffer broadcast, Join's flag
    DDP_BACKWARD = "ddp_backward"  # DDP's gradient buckets (a record's BUCKET flag)
    DDP_INIT = "ddp_init"  # DDP's constructor: parameter check and state broadcast
    ZERO = "zero"  # ZeroRedundancyOptimizer (consolidate_state_dict, step)
    SYNC_BN = "sync_batchnorm"  # SyncBatchNorm's statistics in training mode
    OBJECT = "object"  # an *_object collective: the sizes, then the pickled bytes
    JOIN = "join"  # torch's Join context: shadow all-reduces for ranks that ran out
    FRAMEWORK = "framework"  # a framework helper (Lightning, accelerate, ignite, ...)

    @property
    def code(self) -> str:
        """The letter stored in a record's text ("" for USER: the text stays as it was)."""
        return _CODES[self]

    @property
    def implicit(self) -> bool:
        """Is this a collective the user never wrote (issued by an API on their behalf)?"""
        return self is not Origin.USER

    @staticmethod
    def of(code: str, op: str, flags: int) -> "Origin":
        """The origin of a record from its stored letter, its op and its flags."""
        if flags & L.RecordFlag.BUCKET:
            return Origin.DDP_BACKWARD
        found = _BY_CODE.get(code)
        if found is not None:
            return found
        if flags & L.RecordFlag.OBJECT or op.endswith(("_object", "_object_list")):
            return Origin.OBJECT
        return Origin.USER


_CODES = {Origin.USER: "", Origin.DDP_FORWARD: "F", Origin.DDP_BACKWARD: "B",
          Origin.DDP_INIT: "I", Origin.ZERO: "Z", Origin.SYNC_BN: "S", Origin.OBJECT: "O",
          Origin.JOIN: "J", Origin.FRAMEWORK: "W"}
_BY_CODE = {c: o for o, c in _CODES.items() if c}

_DDP_FILE = "torch/nn/parallel/distributed.py"
_DDP_INIT_NAMES = frozenset({"__init__", "_sync_module_states", "_sync_params_and_buffers",
                             "_verify_param_shape_across_processes", "__setstate__"})
_JOIN_NAMES = frozenset({"main_hook", "post_hook", "_match_all_reduce_for_bwd_pass",
                         "_match_unused_params_allreduce", "_sync_final_model",
                         "_check_global_requires_backward_grad_sync", "notify_join_context",
                         "_notify_procs_to_terminate", "_get_num_nonjoined_procs"})
_OBJECT_NAMES = frozenset({"broadcast_object_list", "all_gather_object", "gather_object",
                           "scatter_object_list", "send_object_list", "recv_object_list"})


def origin_of_frames(frames: Iterable[tuple[str, str]], frameworks: frozenset[str]) -> Origin:
    """The origin of a call from the frames between torch.distributed and the user's frame,
    innermost first, each as (path with '/' separators, function name); ``frameworks``:
    the top-level packages of framework helpers.  The innermost frame that names an API
    decides: Join's hooks, ZeRO, SyncBatchNorm, an object collective, DDP's constructor,
    DDP's forward, a framework package; none: the user's call."""
    ddp = None
    for path, name in frames:
        if path.endswith("torch/distributed/algorithms/join.py") or \
                (path.endswith(_DDP_FILE) and name in _JOIN_NAMES):
            return Origin.JOIN
        if path.endswith("zero_redundancy_optimizer.py"):
            return Origin.ZERO
        if path.endswith(("torch/nn/modules/_functions.py", "torch/nn/modules/batchnorm.py")):
            return Origin.SYNC_BN
        if name in _OBJECT_NAMES and path.endswith("distributed_c10d.py"):
            return Origin.OBJECT
        if name in _DDP_INIT_NAMES and (path.endswith(_DDP_FILE) or
                                        path.endswith("torch/distributed/utils.py")):
            return Origin.DDP_INIT
        if path.endswith(_DDP_FILE) and ddp is None:
            ddp = Origin.DDP_FORWARD  # unless an outer frame is DDP's constructor
        top = _top_package(path)
        if top in frameworks:
            return ddp or Origin.FRAMEWORK
    return ddp or Origin.USER


def _top_package(path: str) -> str:
    for marker in ("/site-packages/", "/dist-packages/"):
        i = path.find(marker)
        if i >= 0:
            return path[i + len(marker):].split("/", 1)[0]
    return ""
