"""Record collectives that ``torch.compile`` puts into a graph.

Dynamo replaces ``dist.all_reduce`` and friends by functional collectives through
``torch.distributed._functional_collectives.traceable_collective_remaps``, keyed by the
function the user's code calls.  After ``patches.install`` that function is ddpdoctor's
recording wrapper, so each wrapper is given a remap of its own: a traceable function that
puts one opaque custom op (``ddpdoctor::collective``) in the graph.  At run time the op
calls the recording wrapper eagerly, so the collective is recorded like any other call,
with ``fullgraph=True`` and with the inductor backend alike.  Arguments the op cannot carry
(split sizes) fall back to torch's own remap: that call runs, unrecorded.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist

_OP_NAME = "ddpdoctor::collective"
_SCHEMA = ("(Tensor(a!)[] outs, Tensor[] ins, str name, str reduce, str group, str site)"
           " -> ()")
_wrapped: dict[str, Callable] = {}  # torch.distributed name -> the recording wrapper


def _group_of(name: str) -> Any:
    return None if not name else dist.distributed_c10d._resolve_process_group(name)


def _reduce_op(name: str) -> Any:
    return getattr(dist.ReduceOp, name.upper()) if name else dist.ReduceOp.SUM


def _run_eager(outs: list[torch.Tensor], ins: list[torch.Tensor], name: str,
               reduce: str, group: str, site: str) -> None:
    """The op's body at run time: the recording wrapper of ``name``, eagerly, with the
    user's line that Dynamo traced as the call site."""
    fn = _wrapped[name]  # its call site is read from this frame's ``site`` (callsites.py)
    pg = _group_of(group)
    if name == "all_reduce":
        fn(outs[0], op=_reduce_op(reduce), group=pg)
    elif name in ("all_gather_into_tensor", "_all_gather_base", "all_to_all_single"):
        fn(outs[0], ins[0], group=pg)
    elif name in ("reduce_scatter_tensor", "_reduce_scatter_base"):
        fn(outs[0], ins[0], op=_reduce_op(reduce), group=pg)
    elif name == "all_gather":
        fn(list(outs), ins[0], group=pg)
    else:
        raise RuntimeError(f"ddpdoctor: no compiled form for {name}")


def _register_op() -> Any:
    op = torch.library.custom_op(_OP_NAME, _run_eager, mutates_args=("outs",),
                                 schema=_SCHEMA)

    @op.register_fake
    def _(outs: list[torch.Tensor], ins: list[torch.Tensor], name: str, reduce: str,
          group: str, site: str) -> None:
        return None

    return op


def _reduce_text(op: Any) -> str:
    """Dynamo hands the reduce op over as funcol's string ("sum"); eager callers pass a
    ReduceOp."""
    if isinstance(op, str):
        return op
    from torch.distributed._functional_collectives import REDUCE_OP_TO_STR

    return REDUCE_OP_TO_STR[op]


def _user_site_being_traced() -> str:
    """The user's line Dynamo is tracing (``path:line|``), baked into the graph as a
    constant (``_traced_user_site``); "" when it cannot be told."""
    from ddpdoctor.runtime.callsites import is_user_file

    ctx = torch._guards.TracingContext.try_get()
    if ctx is None:
        return ""
    for frame in reversed(ctx.extract_stack()):
        if frame.filename and frame.lineno and is_user_file(frame.filename):
            return f"{frame.filename}:{frame.lineno}|"
    return ""


_traced_user_site: Callable[[], str] = _user_site_being_traced  # made constant on activation


def _group_text(group: Any) -> str:
    from torch.distributed._functional_collectives import _resolve_group_name

    return str(_resolve_group_name(group if group is not None else dist.group.WORLD))


# One traceable remap per function, each a module-level def: Dynamo finds a remap by its
# __name__ as an attribute of torch.distributed._functional_collectives.
def _ddpdoctor_all_reduce(tensor: Any, op: Any = "sum", group: Any = None,
                          async_op: bool = False) -> None:
    torch.ops.ddpdoctor.collective([tensor], [], "all_reduce", _reduce_text(op),
                                   _group_text(group), _traced_user_site())


def _ddpdoctor_all_gather_into_tensor(output_tensor: Any, input_tensor: Any,
                                      group: Any = None, async_op: bool = False) -> None:
    torch.ops.ddpdoctor.collective([output_tensor], [input_tensor], "all_gather_into_tensor",
                                   "", _group_text(group), _traced_user_site())


def _ddpdoctor_all_gather_base(output_tensor: Any, input_tensor: Any, group: Any = None,
                               async_op: bool = False) -> None:
    torch.ops.ddpdoctor.collective([output_tensor], [input_tensor], "_all_gather_base", "",
                                   _group_text(group), _traced_user_site())


def _ddpdoctor_reduce_scatter_tensor(output: Any, input: Any, op: Any = "sum",
                                     group: Any = None, async_op: bool = False) -> None:
    torch.ops.ddpdoctor.collective([output], [input], "reduce_scatter_tensor",
                                   _reduce_text(op), _group_text(group), _traced_user_site())


def _ddpdoctor_reduce_scatter_base(output: Any, input: Any, op: Any = "sum",
                                   group: Any = None, async_op: bool = False) -> None:
    torch.ops.ddpdoctor.collective([output], [input], "_reduce_scatter_base",
                                   _reduce_text(op), _group_text(group), _traced_user_site())


def _ddpdoctor_all_gather(tensor_list: Any, tensor: Any, group: Any = None,
                          async_op: bool = False) -> None:
    torch.ops.ddpdoctor.collective(list(tensor_list), [tensor], "all_gather", "",
                                   _group_text(group), _traced_user_site())


def _ddpdoctor_all_to_all_single(output: Any, input: Any, output_split_sizes: Any = None,
                                 input_split_sizes: Any = None, group: Any = None,
                                 async_op: bool = False) -> None:
    if output_split_sizes is not None or input_split_sizes is not None:
        from torch.distributed._functional_collectives import _remapped_all_to_all_single

        _remapped_all_to_all_single(output, input, output_split_sizes, input_split_sizes,
                                    group, async_op)
        return
    torch.ops.ddpdoctor.collective([output], [input], "all_to_all_single", "",
                                   _group_text(group), _traced_user_site())


REMAPS: dict[str, Callable] = {
    "all_reduce": _ddpdoctor_all_reduce,
    "all_gather_into_tensor": _ddpdoctor_all_gather_into_tensor,
    "_all_gather_base": _ddpdoctor_all_gather_base,
    "reduce_scatter_tensor": _ddpdoctor_reduce_scatter_tensor,
    "_reduce_scatter_base": _ddpdoctor_reduce_scatter_base,
    "all_gather": _ddpdoctor_all_gather,
    "all_to_all_single": _ddpdoctor_all_to_all_single,
}


def install(wrappers: dict[str, Callable]) -> None:
    """Give each recording wrapper in ``wrappers`` (name -> wrapper) a traceable remap, once
    Dynamo is imported (importing it costs seconds of CPU in every rank; a job that never
    compiles never pays it)."""
    from ddpdoctor.runtime.import_hooks import after_import

    after_import("torch._dynamo", lambda _module: _activate(wrappers))


def _activate(wrappers: dict[str, Callable]) -> None:
    try:
        _install_remaps(wrappers)
    except (ImportError, AttributeError, RuntimeError, TypeError, ValueError) as e:
        from ddpdoctor.runtime import recorder as R

        rec = R.active()
        if rec is not None:
            rec.note_error("recording compiled collectives", e)


def _install_remaps(wrappers: dict[str, Callable]) -> None:
    global _traced_user_site
    import torch.distributed._functional_collectives as funcol

    remaps = getattr(funcol, "traceable_collective_remaps", None)
    if remaps is None or not hasattr(torch.library, "custom_op"):
        return
    _traced_user_site = torch._dynamo.assume_constant_result(_user_site_being_traced)
    if not hasattr(torch.ops.ddpdoctor, "collective"):
        _register_op()
    from ddpdoctor.runtime.callsites import mark_traced

    mark_traced(_run_eager.__code__)
    for name, remap in REMAPS.items():
        wrapper = wrappers.get(name)
        if wrapper is None:
            continue
        _wrapped[name] = wrapper
        setattr(funcol, remap.__name__, remap)
        remaps[wrapper] = remap
