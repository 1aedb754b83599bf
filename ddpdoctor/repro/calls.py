"""One replayed step as one line of torch code: call_text, tensor_text, comment_text."""

from __future__ import annotations

from ddpdoctor.repro.ddp_replay import (CONSTRUCTION_CHECK, DDP_BACKWARD, DDP_BUILD,
                                        backward_note, build_text)
from ddpdoctor.repro.loaders import BATCH, END, START
from ddpdoctor.repro.safe_text import comment
from ddpdoctor.repro.steps import Step

DTYPES = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8",
          "uint8", "bool", "complex64", "complex128")
ONE_TENSOR = ("all_reduce", "broadcast", "reduce", "send", "recv", "isend", "irecv")
INTO_TENSOR = ("all_gather_into_tensor", "_all_gather_base", "all_gather_single")
SCATTER_TENSOR = ("reduce_scatter_tensor", "_reduce_scatter_base", "reduce_scatter_single")
REDUCE_OPS = {"sum": "SUM", "product": "PRODUCT", "min": "MIN", "max": "MAX", "band": "BAND",
              "bor": "BOR", "bxor": "BXOR", "avg": "AVG"}


def _dtype(dtypes: tuple[str, ...], i: int) -> str:
    name = dtypes[i] if i < len(dtypes) else (dtypes[0] if dtypes else "float32")
    return name if name in DTYPES else "float32"


def tensor_text(shape: tuple[int, ...], dtype: str = "float32") -> str:
    """``z(2, 8)``, or ``z(3, dtype=torch.int64)``: a zero-filled tensor."""
    dims = ", ".join(map(str, shape))
    kind = f"dtype=torch.{dtype}" if dtype != "float32" else ""
    return f"z({', '.join(x for x in (dims, kind) if x)})"


def _one(step: Step, shapes: tuple[tuple[int, ...], ...]) -> str:
    """One tensor: the recorded one; several (coalesced) flattened into one; none: z(1)."""
    if len(shapes) == 1:
        return tensor_text(shapes[0], _dtype(step.dtypes, 0))
    numel = 0
    for s in shapes:
        n = 1
        for d in s:
            n *= d
        numel += n
    return tensor_text((numel or 1,), _dtype(step.dtypes, 0))


def _list(shapes: tuple[tuple[int, ...], ...], dtypes: tuple[str, ...], size: int,
          fallback: str) -> str:
    """A list of zero tensors of the recorded shapes, else ``size`` copies of ``fallback``."""
    if shapes:
        if len(set(shapes)) == 1 and len(shapes) > 2:
            return f"zs({len(shapes)}, {tensor_text(shapes[0], _dtype(dtypes, 0))[2:-1]})"
        return "[" + ", ".join(tensor_text(s, _dtype(dtypes, i))
                               for i, s in enumerate(shapes)) + "]"
    return f"[{fallback} for _ in range({size})]"


def _kwargs(step: Step, group: str | None, reduce: bool = False) -> str:
    out = []
    if reduce and step.reduce_op and step.reduce_op != "sum":
        out.append(f"op=R.{REDUCE_OPS.get(step.reduce_op, 'SUM')}")
    if group:
        out.append(f"group={group}")
    if step.slot >= 0 and not step.p2p:
        out.append("async_op=True")
    return "".join(f", {k}" for k in out)


def call_text(step: Step, group: str | None, size: int, peer: str = "") -> str:
    """The torch.distributed call that replays ``step`` (``group``: its variable, None for
    the default group; ``size``: the group's number of ranks; ``peer``: an expression that
    stands for the recorded peer), or its DataLoader step."""
    it = f"it_{step.group.rpartition('_')[2]}"
    if step.op == START:
        return f"{it} = {step.group}({step.in_shapes[0][0]}, rank)"
    if step.op == BATCH:
        return f"next({it})"
    if step.op == END:
        return f"next({it}, None)"
    if step.op == "optimizer_step":
        return "optimizer_step()"
    if step.wait:
        return f"w{step.slot}.wait()"
    if step.op == DDP_BUILD:
        return build_text(step, group)
    if step.op == DDP_BACKWARD:
        return "torch.autograd.backward(ddp())"
    text = _call(step, group, size, peer or str(max(step.peer, 0)))
    return f"w{step.slot} = {text}" if step.slot >= 0 else text


def _call(step: Step, group: str | None, size: int, peer: str) -> str:
    """(A root not recorded, as in flight recorder dumps, is rank 0.)"""
    op = step.op
    ins, outs = step.in_shapes, step.out_shapes
    one = _one(step, ins) if ins else "z(1)"
    if op in ("all_reduce", "all_reduce_coalesced"):
        return f"dist.all_reduce({one}{_kwargs(step, group, True)})"
    if op == "broadcast":
        return f"dist.broadcast({one}, src={peer}{_kwargs(step, group)})"
    if op == "reduce":
        return f"dist.reduce({one}, dst={peer}{_kwargs(step, group, True)})"
    if op in ("send", "recv", "isend", "irecv"):
        where = "dst" if op.endswith("send") else "src"
        return f"dist.{op}({one}, {where}={peer}{_kwargs(step, group)})"
    if op == CONSTRUCTION_CHECK:  # DDP's construction check: its parameters
        shapes = "[" + ", ".join(tensor_text(s) for s in ins) + "]"
        return f"dist.{op}({group or 'dist.group.WORLD'}, {shapes})"
    if op in ("barrier", "monitored_barrier"):
        return f"dist.{op}({_kwargs(step, group)[2:]})"
    if op == "all_gather":
        out = _list(outs if len(outs) == size else (), step.dtypes, size, one)
        return f"dist.all_gather({out}, {one}{_kwargs(step, group)})"
    if op == "all_to_all_single" and (len(ins) > 1 or len(outs) > 1):
        return _split_exchange(step, group)
    if op in INTO_TENSOR or op in SCATTER_TENSOR or op == "all_to_all_single":
        name = ("all_gather_into_tensor" if op in INTO_TENSOR else
                "reduce_scatter_tensor" if op in SCATTER_TENSOR else op)
        out = _one(step, outs) if outs else _gathered(step, ins, size) if op in INTO_TENSOR \
            else one
        return f"dist.{name}({out}, {one}{_kwargs(step, group, op in SCATTER_TENSOR)})"
    if op == "reduce_scatter":
        out = _one(step, outs) if outs else "z(1)"
        return (f"dist.reduce_scatter({out}, {_list(ins, step.dtypes, size, out)}"
                f"{_kwargs(step, group, True)})")
    if op == "all_to_all":
        return (f"dist.all_to_all({_list(outs, step.dtypes, size, 'z(1)')}, "
                f"{_list(ins, step.dtypes, size, 'z(1)')}{_kwargs(step, group)})")
    if op == "gather":
        return (f"dist.gather({one}, {_list((), (), size, one)} if rank == {peer} else None, "
                f"dst={peer}{_kwargs(step, group)})")
    if op == "scatter":
        out = _one(step, outs) if outs else "z(1)"
        return (f"dist.scatter({out}, {_list((), (), size, out)} if rank == {peer} else None, "
                f"src={peer}{_kwargs(step, group)})")
    return _object_call(step, group, size, peer)


def _gathered(step: Step, ins: tuple[tuple[int, ...], ...], size: int) -> str:
    """The output of an all-gather into one tensor recorded without it (torch's functional
    collectives, DTensor's full_tensor): ``size`` inputs stacked on the first dimension."""
    first = ins[0] if ins else (1,)
    return tensor_text((first[0] * size, *first[1:]) if first else (size,),
                       _dtype(step.dtypes, 0))


def _split_exchange(step: Step, group: str | None) -> str:
    """all_to_all_single recorded with one shape per peer: the rows of each, as split sizes."""
    def whole(shapes: tuple[tuple[int, ...], ...]) -> tuple[str, list[int]]:
        rows = [s[0] if s else 0 for s in shapes]
        rest = shapes[0][1:] if shapes else ()
        return tensor_text((sum(rows), *rest), _dtype(step.dtypes, 0)), rows

    one, sent = whole(step.in_shapes)
    out, got = whole(step.out_shapes or step.in_shapes)
    return (f"dist.all_to_all_single({out}, {one}, output_split_sizes={got}, "
            f"input_split_sizes={sent}{_kwargs(step, group)})")


def _object_call(step: Step, group: str | None, size: int, peer: str) -> str:
    """Object collectives with None for each object (their pickled sizes are not recorded);
    an op that cannot be replayed gets a barrier on its group in its place."""
    op = step.op
    n = step.in_shapes[0][0] if step.in_shapes and step.in_shapes[0] else 1
    g = f", group={group}" if group else ""
    if op == "all_gather_object":
        return f"dist.all_gather_object([None] * {n or size}, None{g})"
    if op == "broadcast_object_list":
        return f"dist.broadcast_object_list([None] * {n}, src={peer}{g})"
    if op == "gather_object":
        return (f"dist.gather_object(None, [None] * {size} if rank == {peer} else None, "
                f"dst={peer}{g})")
    if op == "scatter_object_list":
        return (f"dist.scatter_object_list([None], [None] * {size} if rank == {peer} else "
                f"None, src={peer}{g})")
    if op in ("send_object_list", "recv_object_list"):
        where = "dst" if op.startswith("send") else "src"
        return f"dist.{op}([None] * {n}, {where}={peer}{g})"
    return f"dist.barrier({g[2:]})  # stands in for {op}, which a replay cannot make"


def comment_text(step: Step) -> str:
    """``# train.py:42  loss.backward()  [DDP bucket 0]``: where the user made the call."""
    parts = [step.site or "?"]
    if step.source:
        parts.append(step.source)
    extra = []
    if step.op == CONSTRUCTION_CHECK:
        extra.append("DDP's construction check: the shapes of the parameters it reduces")
    if step.op == DDP_BUILD:
        extra.append("DDP, on the shapes of the parameters it reduces")
    if step.op == DDP_BACKWARD:
        extra.append(backward_note(step))
    if step.bucket >= 0:
        extra.append(f"DDP bucket {step.bucket}")
    if step.framework_site:
        extra.append(f"via {step.framework_site}")
    if len(step.in_shapes) > 1 and step.op in ONE_TENSOR:
        extra.append(f"{len(step.in_shapes)} tensors, flattened")
    if step.obj:
        extra.append("objects: None stands in")
    text = "  ".join(parts)
    return comment(f"# {text}" + (f"  [{'; '.join(extra)}]" if extra else ""))
