"""Where each torch.distributed call keeps the arguments a record needs (by position
and name), and fast readers of them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ddpdoctor.trace import layout as L

_SEND = int(L.RecordFlag.SEND)
_RECV = int(L.RecordFlag.RECV)


@dataclass(frozen=True)
class OpSpec:
    """Where a torch.distributed function keeps its arguments (by position and name).

    ``ins``/``outs`` name a tensor argument (``"tensor"``) or a list of tensors
    (``"*tensor_list"``); ``peer`` is the src/dst argument; ``direction`` marks p2p calls.
    """

    params: tuple[str, ...]
    ins: tuple[str, ...] = ()
    outs: tuple[str, ...] = ()
    reduce: bool = False
    peer: str = ""
    direction: int = 0
    obj: bool = False
    lists: tuple[str, ...] = ()  # object lists: their length is recorded as a shape

    def arg(self, args: tuple, kwargs: dict, name: str, default: Any = None) -> Any:
        if kwargs and name in kwargs:
            return kwargs[name]
        i = _POSITIONS.get((self.params, name))
        if i is None:
            return default
        return args[i] if i < len(args) else default


SPECS: dict[str, OpSpec] = {
    "all_reduce": OpSpec(("tensor", "op", "group", "async_op"), ins=("tensor",), reduce=True),
    "all_reduce_coalesced": OpSpec(("tensors", "op", "group", "async_op"),
                                   ins=("*tensors",), reduce=True),
    "broadcast": OpSpec(("tensor", "src", "group", "async_op", "group_src"),
                        ins=("tensor",), peer="src"),
    "barrier": OpSpec(("group", "async_op", "device_ids", "timeout")),
    "monitored_barrier": OpSpec(("group", "timeout", "wait_all_ranks")),
    "all_gather": OpSpec(("tensor_list", "tensor", "group", "async_op"),
                         ins=("tensor",), outs=("*tensor_list",)),
    "all_gather_into_tensor": OpSpec(("output_tensor", "input_tensor", "group", "async_op"),
                                     ins=("input_tensor",), outs=("output_tensor",)),
    "_all_gather_base": OpSpec(("output_tensor", "input_tensor", "group", "async_op"),
                               ins=("input_tensor",), outs=("output_tensor",)),
    "all_gather_single": OpSpec(("output_tensor", "input_tensor", "group", "async_op"),
                                ins=("input_tensor",), outs=("output_tensor",)),
    "all_gather_coalesced": OpSpec(("output_tensor_lists", "input_tensor_list", "group",
                                    "async_op"), ins=("*input_tensor_list",)),
    "reduce_scatter_single": OpSpec(("output", "input", "op", "group", "async_op"),
                                    ins=("input",), outs=("output",), reduce=True),
    "reduce_scatter": OpSpec(("output", "input_list", "op", "group", "async_op"),
                             ins=("*input_list",), outs=("output",), reduce=True),
    "reduce_scatter_tensor": OpSpec(("output", "input", "op", "group", "async_op"),
                                    ins=("input",), outs=("output",), reduce=True),
    "_reduce_scatter_base": OpSpec(("output", "input", "op", "group", "async_op"),
                                   ins=("input",), outs=("output",), reduce=True),
    "reduce": OpSpec(("tensor", "dst", "op", "group", "async_op", "group_dst"),
                     ins=("tensor",), reduce=True, peer="dst"),
    "gather": OpSpec(("tensor", "gather_list", "dst", "group", "async_op", "group_dst"),
                     ins=("tensor",), peer="dst"),
    "scatter": OpSpec(("tensor", "scatter_list", "src", "group", "async_op", "group_src"),
                      outs=("tensor",), peer="src"),
    "all_to_all": OpSpec(("output_tensor_list", "input_tensor_list", "group", "async_op"),
                         ins=("*input_tensor_list",), outs=("*output_tensor_list",)),
    "all_to_all_single": OpSpec(("output", "input", "output_split_sizes",
                                 "input_split_sizes", "group", "async_op"),
                                ins=("input",), outs=("output",)),
    "send": OpSpec(("tensor", "dst", "group", "tag", "group_dst"), ins=("tensor",),
                   peer="dst", direction=_SEND),
    "recv": OpSpec(("tensor", "src", "group", "tag", "group_src"), ins=("tensor",),
                   peer="src", direction=_RECV),
    "isend": OpSpec(("tensor", "dst", "group", "tag", "group_dst"), ins=("tensor",),
                    peer="dst", direction=_SEND),
    "irecv": OpSpec(("tensor", "src", "group", "tag", "group_src"), ins=("tensor",),
                    peer="src", direction=_RECV),
    "all_gather_object": OpSpec(("object_list", "obj", "group"), obj=True,
                                lists=("object_list",)),
    "broadcast_object_list": OpSpec(("object_list", "src", "group", "device", "group_src"),
                                    obj=True, peer="src", lists=("object_list",)),
    "gather_object": OpSpec(("obj", "object_gather_list", "dst", "group", "group_dst"),
                            obj=True, peer="dst"),
    "scatter_object_list": OpSpec(("scatter_object_output_list",
                                   "scatter_object_input_list", "src", "group",
                                   "group_src"), obj=True, peer="src",
                                  lists=("scatter_object_output_list",)),
    "send_object_list": OpSpec(("object_list", "dst", "group", "device", "group_dst",
                                "use_batch"), obj=True, peer="dst", direction=_SEND,
                               lists=("object_list",)),
    "recv_object_list": OpSpec(("object_list", "src", "group", "device", "group_src",
                                "use_batch"), obj=True, peer="src", direction=_RECV,
                               lists=("object_list",)),
}


_POSITIONS: dict[tuple[tuple[str, ...], str], int] = {
    (spec.params, name): i for spec in SPECS.values() for i, name in enumerate(spec.params)}


class ShapeOnly:
    """Stands in for a tensor when only a length is known (object lists)."""

    __slots__ = ("shape", "dtype")

    def __init__(self, n: int):
        self.shape = (n,)
        self.dtype = "torch.object"

    def numel(self) -> int:
        return self.shape[0]


class Chunk:
    """Stands in for the rows of a tensor one all_to_all_single peer sends or receives: the
    split sizes are recorded as shapes, one per peer, as all_to_all's lists are."""

    __slots__ = ("shape", "dtype")

    def __init__(self, rows: int, like: Any):
        self.shape = (rows, *tuple(like.shape)[1:])
        self.dtype = like.dtype

    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


def split_chunks(spec: OpSpec, args: tuple, kwargs: dict, ins: list, outs: Any) -> tuple:
    """all_to_all_single's input and output as one shape per peer, when its split sizes are
    given (a missing list is the even split over as many peers); else unchanged."""
    in_sizes = spec.arg(args, kwargs, "input_split_sizes")
    out_sizes = spec.arg(args, kwargs, "output_split_sizes")
    peers = len(in_sizes or ()) or len(out_sizes or ())
    if not peers or len(ins) != 1 or len(outs) != 1:
        return ins, outs

    def chunks(t: Any, sizes: Any) -> list:
        if not sizes:
            rows = t.shape[0] if len(t.shape) else 0
            sizes = [rows // peers] * peers
        return [Chunk(int(n), t) for n in sizes]

    return chunks(ins[0], in_sizes), chunks(outs[0], out_sizes)


def tensors_of(spec: OpSpec, names: tuple[str, ...], args: tuple, kwargs: dict) -> list:
    out: list = []
    for name in names:
        if name[0] == "*":
            value = spec.arg(args, kwargs, name[1:])
            if value:
                out.extend(value)
        else:
            value = spec.arg(args, kwargs, name)
            if value is not None:
                out.append(value)
    return out


_REDUCE_NAMES: dict[Any, str] = {}


def reduce_name(op: Any) -> str:
    if op is None:
        return "sum"
    try:
        return _REDUCE_NAMES[op]
    except (KeyError, TypeError):
        pass  # not seen yet (or unhashable): name it below
    name = str(getattr(op, "name", None) or str(op).rsplit(".", 1)[-1]).lower()
    try:
        _REDUCE_NAMES[op] = name
    except TypeError:
        pass  # unhashable op objects are named each time
    return name


def peer_of(spec: OpSpec, args: tuple, kwargs: dict, group: Any) -> int:
    if not spec.peer:
        return -1
    value = spec.arg(args, kwargs, spec.peer)
    if value is None:  # group_src / group_dst: a rank inside the group
        local = spec.arg(args, kwargs, "group_" + spec.peer)
        if local is None:
            return -1
        try:
            import torch.distributed as dist

            return dist.get_global_rank(group, local) if group is not None else int(local)
        except (RuntimeError, ValueError):
            return int(local)
    return int(value)


def getter(spec: OpSpec, name: str, default: Any = None) -> Callable[[tuple, dict], Any]:
    """A fast reader of argument ``name`` (positional or keyword) of calls to ``spec``."""
    if name not in spec.params:
        return lambda args, kwargs: kwargs.get(name, default) if kwargs else default
    i = spec.params.index(name)

    def get(args: tuple, kwargs: dict) -> Any:
        if len(args) > i:
            return args[i]
        return kwargs.get(name, default) if kwargs else default

    return get


def is_simple_tensor_op(spec: OpSpec) -> bool:
    """One input tensor, no outputs, no object lists: all_reduce, broadcast, send, ..."""
    return len(spec.ins) == 1 and spec.ins[0][0] != "*" and not spec.outs and not spec.lists


def p2p_op_peer(p: Any) -> int:
    """The global rank a ``P2POp`` talks to (torch canonicalises ``peer`` and
    ``group_peer``; -1 when neither can be told)."""
    peer = getattr(p, "peer", None)
    if peer is not None:
        return int(peer)
    local = getattr(p, "group_peer", None)
    if local is None:
        return -1
    try:
        import torch.distributed as dist

        return dist.get_global_rank(p.group, local) if p.group is not None else int(local)
    except (RuntimeError, ValueError):
        return int(local)
