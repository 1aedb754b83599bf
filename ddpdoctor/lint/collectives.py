"""Which calls are collectives: torch.distributed, DDP's implicit ones, and the frameworks'."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ddpdoctor.frameworks import fsdp, ignite, known, lightning
from ddpdoctor.lint.framework_objects import built_kind, named_kinds, object_kinds
from ddpdoctor.lint.hidden_collectives import hidden_collective
from ddpdoctor.lint.module import BUFFER_WORDS, ParsedModule, mentions, walk
from ddpdoctor.lint.taint import key_of

DIST = "torch.distributed"
DIST_COLLECTIVES = frozenset({
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "all_to_all",
    "all_to_all_single", "broadcast", "broadcast_object_list", "reduce", "reduce_scatter",
    "reduce_scatter_tensor", "gather", "gather_object", "scatter", "scatter_object_list",
    "barrier", "monitored_barrier", "new_group", "new_subgroups",
    "new_subgroups_by_enumeration", "init_process_group", "destroy_process_group",
    "all_reduce_coalesced", "all_gather_coalesced", "_all_gather_base", "_reduce_scatter_base",
    "init_device_mesh"})
FSDP_OPTIM_STATE = fsdp.OPTIM_STATE
DIST_P2P = frozenset({"send", "recv", "isend", "irecv", "batch_isend_irecv",
                      "send_object_list", "recv_object_list"})
MODULE_COLLECTIVES: dict[str, frozenset[str]] = {
    DIST: DIST_COLLECTIVES | DIST_P2P,
    "torch.distributed.distributed_c10d": DIST_COLLECTIVES | DIST_P2P,
    "torch.distributed.device_mesh": frozenset({"init_device_mesh"}),
    "torch.distributed.nn": frozenset({"all_reduce", "all_gather", "broadcast", "reduce",
                                       "all_to_all", "gather", "scatter", "reduce_scatter"}),
    "torch.distributed.nn.functional": frozenset({"all_reduce", "all_gather", "broadcast",
                                                  "reduce", "all_to_all", "gather", "scatter",
                                                  "reduce_scatter"}),
    # torch's distributed checkpoint: every rank saves and loads its shards together
    "torch.distributed.checkpoint": frozenset({"save", "load", "save_state_dict",
                                               "load_state_dict", "async_save"}),
    "torch.distributed.checkpoint.state_dict": frozenset({
        "get_model_state_dict", "get_optimizer_state_dict", "get_state_dict",
        "set_model_state_dict", "set_optimizer_state_dict", "set_state_dict"}),
    **known.collectives(),  # the frameworks' (ddpdoctor/frameworks/), FSDP's among them
}
# calls whose argument 0 is the same on every rank afterwards
IN_PLACE_UNIFORM = frozenset({"all_reduce", "broadcast", "all_gather", "all_gather_object",
                              "broadcast_object_list", "all_gather_into_tensor", "reduce"})
DDP_WRAPPERS = frozenset({
    "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.parallel.distributed.DistributedDataParallel",
    "torch.nn.DistributedDataParallel", "ddpdoctor.DistributedDataParallel"}) | \
    known.ddp_wrappers()
SYNC_BATCHNORM = ("SyncBatchNorm.convert_sync_batchnorm", "SyncBatchNorm")

# methods that are collectives on a framework object of the key's kind (lint/framework_objects.py)
OBJECT_METHODS: dict[str, frozenset[str]] = known.object_methods()
UNIFORM_RESULT_METHODS = known.uniform_results() | {"compute"}  # (compute: a metric's)
ANY_RECEIVER = frozenset({"consolidate_state_dict", "full_tensor"})  # (DTensor: an all-gather)
LIGHTNING_SELF = lightning.SELF_COLLECTIVES
LOG_METHODS = lightning.LOG_METHODS
BACKWARD_KINDS = frozenset(known.backward_kinds())
P2P_NAMES = DIST_P2P
# the methods a receiver taken for a framework's object by its name may issue a collective in
BY_NAME_METHODS = frozenset(m for ms in OBJECT_METHODS.values() for m in ms) | \
    frozenset(m.method for m in known.hidden_methods()) | {"backward"}
BEFORE_DDP = "<before ddp>"  # a kinds key: the scope has not wrapped its model in DDP yet


@dataclass(frozen=True)
class Site:
    """One call that is (or leads to) a collective.

    Args:
        name: what it is, e.g. ``barrier``, ``DDP forward``, ``save()`` (a user function).
        line: its line.
        sig: what must match on the other ranks (the op and its group).
        p2p: a point-to-point op (ranks differ by design; not matched against a branch).
    """

    name: str
    line: int
    sig: str
    p2p: bool = False
    grouped: bool = False  # on an explicit process group (``group=``, ``process_group=``)
    certain: bool = True  # False: a collective under some configurations only (FSDP, ZeRO)
    seq: tuple[str, ...] = ()  # a call of a function that issues these, on every call


def flat(sites: list[Site]) -> list[str]:
    """What ranks that run ``sites`` issue, in order (p2p ops aside): a call of a function that
    issues the same collectives on every path counts as those (two helpers that each make one
    all_reduce then a DDP forward match), any other call as itself."""
    return [x for s in sites if not s.p2p for x in (s.seq or (s.sig,))]


def receiver_name(node: ast.expr) -> str:
    """The last name of a receiver: ``self.trainer.strategy`` -> ``strategy``."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call):
        return receiver_name(node.func)
    return ""


def group_text(call: ast.Call) -> str:
    for k in call.keywords:
        if k.arg in ("group", "process_group"):
            return ast.unparse(k.value)
    return ""


def dist_op(call: ast.Call, module: ParsedModule) -> str | None:
    """The op name when ``call`` is a module-level collective (``dist.barrier`` -> barrier)."""
    name = module.qualified(call.func)
    if name is None or "." not in name:
        return None
    prefix, op = name.rsplit(".", 1)
    ops = MODULE_COLLECTIVES.get(prefix)
    return op if ops is not None and op in ops else None


def is_ddp_wrap(call: ast.Call, module: ParsedModule) -> bool:
    name = module.qualified(call.func) or ""
    return name in DDP_WRAPPERS or name.endswith(("DistributedDataParallel",
                                                  fsdp.WRAPPER_NAME))


def is_sync_batchnorm(call: ast.Call, module: ParsedModule) -> bool:
    name = module.qualified(call.func) or ""
    return name.endswith(SYNC_BATCHNORM)


def uniform_result(call: ast.Call, module: ParsedModule, kinds: dict[str, frozenset[str]]) -> bool:
    """True when the call's result is the same on every rank (a gather, a reduce)."""
    op = dist_op(call, module)
    if op is not None:
        return op in IN_PLACE_UNIFORM or op.startswith(("all_", "broadcast"))
    if isinstance(call.func, ast.Attribute) and call.func.attr in UNIFORM_RESULT_METHODS:
        if call.func.attr == "compute":
            key = key_of(call.func.value)
            return key is not None and "metric" in kinds.get(key, frozenset())
        recv = call.func.value
        return bool(object_kinds(recv, kinds) or named_kinds(receiver_name(recv))) or \
            receiver_name(recv) == "self"
    return False


def classify(call: ast.Call, module: ParsedModule, kinds: dict[str, frozenset[str]],
             no_grad: bool, no_sync: bool, has_ddp: bool) -> Site | None:
    """The collective ``call`` is, if any (user functions aside: see summaries).

    Args:
        kinds: what objects names hold (``ddp``, ``syncbn``, ``evaluator``, ``metric``).
        no_grad: inside ``torch.no_grad()``: a DDP forward does not all-reduce there.
        no_sync: inside ``model.no_sync()``: neither forward nor backward syncs.
        has_ddp: the file wraps a model in DDP (a ``.backward()`` all-reduces gradients).
    """
    line = call.lineno
    op = dist_op(call, module)
    if op is not None:
        group = group_text(call)
        return Site(op, line, f"{op}({group})", op in P2P_NAMES, bool(group))
    if is_ddp_wrap(call, module):
        return Site("DDP construction (broadcasts the parameters)", line, "ddp_init",
                    grouped=bool(group_text(call)))
    func = call.func
    key = key_of(func)
    if key is not None:
        labels = kinds.get(key, frozenset())
        if "syncbn" in labels and not no_sync:
            return Site("SyncBatchNorm forward (all-gathers statistics)", line, "forward")
        grouped = "grouped" in labels
        if "ddp" in labels and not no_sync and not no_grad:
            return Site("DDP forward (prepares the gradient all-reduce)", line, "forward",
                        grouped=grouped)
        if "ddp" in labels and "buffers" in labels and not no_sync:
            return Site("DDP forward (broadcasts the module's buffers)", line, "forward",
                        grouped=grouped)
    if not isinstance(func, ast.Attribute):
        return None
    method, recv = func.attr, func.value
    rname = receiver_name(recv).lower()
    objects = object_kinds(recv, kinds)
    seen = bool(objects)  # built where lint saw it; else the receiver's name is all it has
    by_name = "" if seen else f"; `{receiver_name(recv)}` taken for a framework's object by its name"
    if not seen and method in BY_NAME_METHODS and not kinds.get(key_of(recv) or "", frozenset()):
        objects = named_kinds(rname)  # built as nothing lint knows: its name is all there is
    if method == "backward" and not no_sync and not no_grad and BEFORE_DDP not in kinds and (
            has_ddp or objects & BACKWARD_KINDS):
        models = [labels for labels in kinds.values() if "ddp" in labels]
        grouped = bool(models) and all("grouped" in labels for labels in models)
        if has_ddp or seen:
            return Site("backward (DDP's gradient all-reduce)", line, "backward",
                        grouped=grouped)
        return Site(f"backward (DDP's gradient all-reduce{by_name})", line, "backward",
                    grouped=grouped, certain=False)
    if method == lightning.MANUAL_BACKWARD and rname == "self":
        return Site("manual_backward (DDP's gradient all-reduce)", line, "backward")
    if method in ANY_RECEIVER:
        return Site(method, line, method)
    if isinstance(recv, ast.Name) and recv.id == "self" and method in LIGHTNING_SELF:
        return Site(f"self.{method}", line, method)
    if method in LOG_METHODS and _sync_dist(call):
        return Site(f"{method}(sync_dist=True)", line, "log_sync")
    if any(method in OBJECT_METHODS.get(kind, ()) for kind in objects):
        return Site(f"{receiver_name(recv)}.{method}" + (f" ({by_name[2:]})" if by_name else ""),
                    line, method, certain=seen)
    hidden = hidden_collective(objects, method, module.packages())
    if hidden is not None:
        when = "" if hidden.always else " under some configurations"
        return Site(f"{receiver_name(recv)}.{method} (issues {hidden.collective}{when}: "
                    f"{hidden.source}{by_name})", line, method, certain=hidden.always and seen)
    if method == "state_dict" and "fsdp" in kinds.get(key_of(recv) or "", frozenset()):
        return Site(f"{receiver_name(recv)}.state_dict (FSDP all-gathers the full state dict)",
                    line, "fsdp_state_dict")
    rkey = key_of(recv)
    labels = kinds.get(rkey, frozenset()) if rkey else frozenset()
    if method == "run" and "evaluator" in labels:
        return Site(f"{rkey}.run (its metrics all-reduce)", line, "evaluator_run")
    if method in ("compute", "sync") and "metric" in labels:
        return Site(f"{rkey}.{method} (the metric syncs across ranks)", line, "metric_compute")
    return None


def _sync_dist(call: ast.Call) -> bool:
    for k in call.keywords:
        if k.arg == lightning.SYNC_KEYWORD:
            return not (isinstance(k.value, ast.Constant) and not k.value.value)
    return False


def has_buffers(node: ast.expr, module: ParsedModule) -> bool:
    """True when a module built by ``node`` has buffers DDP broadcasts in every forward
    (a BatchNorm in the expression, or in the file's class it builds)."""
    if mentions(walk(node), BUFFER_WORDS):
        return True
    if isinstance(node, ast.Call):
        name = (module.qualified(node.func) or "").rsplit(".", 1)[-1]
        return name in module.buffer_classes()
    return False


def call_kinds(call: ast.Call, module: ParsedModule) -> frozenset[str]:
    """What object a call's result is: ``ddp`` for DDP(...), ``loader`` for DataLoader(...)."""
    name = module.qualified(call.func) or ""
    last = name.rsplit(".", 1)[-1]
    if is_sync_batchnorm(call, module):
        return frozenset({"syncbn", "model"})
    if is_ddp_wrap(call, module):
        quiet = any(k.arg == "broadcast_buffers" and isinstance(k.value, ast.Constant) and
                    not k.value.value for k in call.keywords)
        found = {"ddp", "model"}
        if (module.qualified(call.func) or "").endswith("FullyShardedDataParallel"):
            found.add("fsdp")
        if not quiet and call.args and has_buffers(call.args[0], module):
            found.add("buffers")
        if group_text(call):
            found.add("grouped")  # its collectives run on that group only
        return frozenset(found)
    if has_buffers(call, module):
        return frozenset({"buffers", "model"})
    if last in ("DataLoader", ignite.AUTO_DATALOADER):
        return frozenset({"loader"})
    if last == "DistributedSampler":
        return frozenset({"sampler"})
    if name.startswith("torch.optim.lr_scheduler."):
        return frozenset({"scheduler"})
    if name.startswith("torch.optim."):
        return frozenset({"optimizer"})
    built = built_kind(call, module)
    if built:
        return built
    if last in ignite.EVALUATOR_BUILDERS and any(
            k.arg == "metrics" for k in call.keywords):
        return frozenset({"evaluator"})
    if name.startswith(("torchmetrics.", *ignite.METRIC_MODULES)):
        return frozenset({"metric"})
    if name in module.classes():
        return frozenset({f"class:{name}"})  # an object of the file's own class
    return frozenset()
