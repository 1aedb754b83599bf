"""TaintEval: an expression's taint in a function's state: the sources of values that differ
between ranks (the rank, the world size, the file system, the clock, chance, data), how they
flow through calls lint knows and calls it cannot read, and the results of the project's own
functions and classes (from their summaries)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace
from typing import Callable

from ddpdoctor.frameworks import known
from ddpdoctor.lint.known_calls import LOAD_CALLS, bound_arguments, known_call, short, splits
from ddpdoctor.lint.module import ParsedModule
from ddpdoctor.lint.taint import SETUP_KINDS, Env, Taint, TaintKind, key_of, share_sized, \
    stronger
from ddpdoctor.lint.uniformity import device_move, is_presence_test, value_keywords

RANK_ENV_VARS = frozenset({"RANK", "LOCAL_RANK", "GROUP_RANK", "NODE_RANK", "SLURM_PROCID",
                           "SLURM_LOCALID", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                           "PMI_RANK", "LOCAL_PROCESS_RANK"})
WORLD_ENV_VARS = frozenset({"WORLD_SIZE", "LOCAL_WORLD_SIZE", "SLURM_NTASKS",
                            "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"})
RANK_CALLS = frozenset({
    "torch.distributed.get_rank", "torch.distributed.get_node_local_rank",
    "torch.distributed.get_global_rank", "torch.distributed.get_group_rank"}) | \
    known.rank_calls()  # and the frameworks' (ddpdoctor/frameworks/)
WORLD_CALLS = frozenset({"torch.distributed.get_world_size",
                         "torch.distributed.is_initialized",
                         "torch.distributed.is_available"}) | known.world_calls()
RANK_ATTRS = known.rank_attrs()  # the frameworks' documented attributes (ddpdoctor/frameworks/)
RANK_METHODS = frozenset({"get_rank", "get_local_rank", "get_global_rank", "rank"})
WORLD_METHODS = frozenset({"get_world_size", "get_global_size", "get_local_size"})
WORLD_ATTRS = frozenset({"world_size", "num_processes", "num_replicas"})
# what a rank finds on its file system: whether a file is there (yet), its size and age: a
# per-rank view even of a shared directory (a file another rank is writing, a network file
# system's cached attributes)
FS_CALLS = frozenset({"os.path.exists", "os.path.isfile", "os.path.isdir", "os.path.getsize",
                      "os.path.getmtime", "os.path.lexists", "os.access", "os.stat"})
FS_METHODS = frozenset({"exists", "is_file", "is_dir", "stat"})
# what a directory holds: the same on every rank that lists the same directory (a resumed
# run's newest checkpoint in the output directory every rank names alike), this rank's own
# view where the directory is the rank's (a path built from the rank)
LISTING_CALLS = frozenset({"os.listdir", "os.scandir", "glob.glob", "glob.iglob"})
LISTING_METHODS = frozenset({"glob", "rglob", "iterdir"})
TIME_CALLS = frozenset({"time.time", "time.perf_counter", "time.monotonic", "time.time_ns",
                        "time.process_time", "datetime.datetime.now", "datetime.now",
                        "datetime.datetime.utcnow", "datetime.utcnow"})
RANDOM_PREFIXES = ("random.", "numpy.random.")
RANDOM_EXEMPT = frozenset({"seed", "default_rng", "RandomState", "Generator", "SeedSequence",
                           "Random", "SystemRandom", "get_state", "set_state", "getstate",
                           "setstate", "PCG64", "MT19937"})
TORCH_RANDOM = frozenset({"torch.rand", "torch.randn", "torch.randint", "torch.randperm",
                          "torch.bernoulli", "torch.multinomial", "torch.normal",
                          "torch.rand_like", "torch.randn_like", "torch.randint_like"})
DATA_METHODS = frozenset({"item", "tolist", "isnan", "isinf", "isfinite", "any", "all"})
DATA_CALLS = frozenset({"torch.isnan", "torch.isinf", "torch.isfinite", "math.isnan",
                        "math.isinf", "math.isfinite", "numpy.isnan", "numpy.isinf",
                        "numpy.isfinite"})


# loaders and samplers that give every rank the same number of items, whatever rank they get
EVEN_SHARDS = ("DistributedSampler", "prepare_data_loader", "auto_dataloader",
               "ElasticDistributedSampler", "DistributedBatchSampler")
EVEN_SHARD_METHODS = frozenset({"prepare", "prepare_data_loader", "setup_dataloaders"})
SHARD_ARGS = frozenset({"sampler", "batch_sampler"})
SEED_ARGS = frozenset({"generator", "worker_init_fn", "seed", "num_workers", "pin_memory",
                       "timeout", "prefetch_factor", "persistent_workers",
                       "multiprocessing_context", "collate_fn"})


def env_var_name(node: ast.expr, module: ParsedModule) -> str | None:
    """``os.environ["X"]``, ``os.environ.get("X")``, ``os.getenv("X")`` -> ``X``."""
    if isinstance(node, ast.Subscript) and module.qualified(node.value) == "os.environ":
        sl = node.slice
        if isinstance(sl, ast.Constant) and isinstance(sl.value, str):
            return sl.value
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        name = module.qualified(node.func)
        if name in ("os.environ.get", "os.getenv") and isinstance(node.args[0].value, str):
            return node.args[0].value
    return None


@dataclass(frozen=True)
class BuiltObject:
    """A call that builds an object of a linted class, and what its attributes may hold (the
    object's taint as a whole)."""

    cls: ast.ClassDef
    state: Taint | None


@dataclass
class TaintEval:
    """Evaluates an expression's taint in an environment.

    Args:
        module: the file (its imports resolve calls).
        env: the function's state at this point.
        callee: the linted function a call reaches (its summary says what its result carries
            of its own and of its arguments), or the linted class it builds; None when unknown.
        uniform_call: True for calls whose result is the same on every rank (a gather).
        on_world_split: told the line of a slice or ``range`` that splits by world size
            without the rank (every rank reads the same items).
    """

    module: ParsedModule
    env: Env
    callee: Callable[[ast.Call], object]
    uniform_call: Callable[[ast.Call], bool]
    on_world_split: Callable[[int], None]

    def of(self, node: ast.expr | None) -> Taint | None:
        """The taint of ``node`` (None: the same on every rank, as far as we know)."""
        if node is None:
            return None
        method = getattr(self, f"_{type(node).__name__}", None)
        if method is not None:
            return method(node)
        result: Taint | None = None
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                result = stronger(result, self.of(child))
        return result

    def all_of(self, nodes: list[ast.expr]) -> Taint | None:
        result: Taint | None = None
        for n in nodes:
            result = stronger(result, self.of(n))
        return result

    def _Name(self, node: ast.Name) -> Taint | None:
        return self.env.taints.get(node.id)

    def _Lambda(self, node: ast.Lambda) -> Taint | None:
        return None

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp |
                       ast.DictComp) -> Taint | None:
        """What the items depend on, and which and how many there are (iterables, filters)."""
        parts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        saved = (dict(self.env.taints), set(self.env.uniform))
        for gen in node.generators:
            parts += [gen.iter, *gen.ifs]
            source = gen.iter
            if isinstance(source, ast.Call) and isinstance(source.func, ast.Attribute) and \
                    source.func.attr in ("items", "values", "keys") and not source.args:
                source = source.func.value
            uniform = key_of(source) in self.env.uniform
            item = None if uniform else self.of(gen.iter)
            for target in ast.walk(gen.target):  # the comprehension's own names
                if isinstance(target, ast.Name):
                    self.env.taints.pop(target.id, None)
                    self.env.uniform.discard(target.id)
                    if item is not None:
                        self.env.taints[target.id] = item
                    elif uniform:  # {k: v.item() for k, v in reduced.items()}
                        self.env.uniform.add(target.id)
        try:
            return self.all_of(parts)
        finally:
            self.env.taints, self.env.uniform = saved

    _ListComp = _SetComp = _GeneratorExp = _DictComp = _comprehension

    def _Compare(self, node: ast.Compare) -> Taint | None:
        sides = [node.left, *node.comparators]
        if len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)) and \
                isinstance(node.left, ast.Constant) and self._device(node.comparators[0]):
            return None  # "cuda" in device: the device's type, the same on every rank
        taints = [self.of(side) for side in sides]
        if len(node.ops) <= 2:
            for side, t in zip(sides, taints):
                if t is not None and t.kind == TaintKind.RANK and is_presence_test(node, side):
                    return None  # "is there a rank at all?": every rank answers alike
        result: Taint | None = None
        for t in taints:
            result = stronger(result, t)
        return result

    def _device(self, node: ast.expr) -> bool:
        key = key_of(node)
        return key is not None and "device" in self.env.kinds.get(key, frozenset())

    def _Attribute(self, node: ast.Attribute) -> Taint | None:
        if node.attr == "type" and self._device(node.value):
            return None  # device.type: "cuda" on every rank
        if node.attr in RANK_ATTRS:
            return Taint(TaintKind.RANK, node.lineno)
        if node.attr in WORLD_ATTRS:
            return Taint(TaintKind.WORLD, node.lineno)
        key = key_of(node)
        if key is not None and key in self.env.taints:
            return self.env.taints[key]
        whole = self.of(node.value)
        if whole is not None and whole.state:
            return None  # an object of a linted class: its tainted attributes are known
        return whole

    def _Subscript(self, node: ast.Subscript) -> Taint | None:
        var = env_var_name(node, self.module)
        if var is not None:
            return self._env_var(var, node.lineno)
        base = self.of(node.value)
        index = self.of(node.slice)
        if index is not None and index.kind == TaintKind.RANK and (
                isinstance(node.slice, ast.Slice) or splits(node.value)):
            index = replace(index, kind=TaintKind.SHARD)  # x[rank::world], split(x, n)[rank]
        elif index is not None and isinstance(node.slice, ast.Slice) and \
                index.kind == TaintKind.WORLD and self._strides_by_world(node.slice.step):
            self.on_world_split(node.lineno)
        return stronger(base, index)

    @staticmethod
    def _env_var(var: str, line: int) -> Taint | None:
        if var in RANK_ENV_VARS:
            return Taint(TaintKind.RANK, line)
        if var in WORLD_ENV_VARS:
            return Taint(TaintKind.WORLD, line)
        return None

    def _Call(self, node: ast.Call) -> Taint | None:
        var = env_var_name(node, self.module)
        if var is not None:
            return self._env_var(var, node.lineno)
        if self.uniform_call(node):
            return None
        moved = device_move(node)
        if moved is not None:  # x.to(rank): the device is the rank's, the values are x's
            return self.of(moved)
        name = self.module.qualified(node.func) or ""
        line = node.lineno
        source = self._source_taint(node, name, line)
        if source is not None:
            return source
        if name.endswith(EVEN_SHARDS) or (isinstance(node.func, ast.Attribute) and
                                          node.func.attr in EVEN_SHARD_METHODS):
            return None
        target = self.callee(node)
        if isinstance(target, BuiltObject):
            return target.state  # a new object of a linted class: what its attributes hold
        if target is not None:
            return self._user_result(node, target)
        if name.endswith(".islice") or name == "islice":
            return self.all_of(node.args[1:])
        if name == "len" and node.args and key_of(node.args[0]) in self.env.shapes:
            return self.env.shapes[key_of(node.args[0]) or ""]
        if name == "len" and len(node.args) == 1 and not (
                isinstance(node.args[0], ast.Call) and
                known_call(self.module.qualified(node.args[0].func) or "", node.args[0])):
            return share_sized(self.of(node.args[0]))  # len(x): x's size not seen computed
        if name in LOAD_CALLS:  # a file's contents: what every rank reads from it
            t = self.all_of(node.args)
            return None if t is None or t.kind == TaintKind.FILESYSTEM else t
        known = known_call(name, node)
        arg_of = self.of if known else self.explicit_of
        kept = [k.value for k in value_keywords(node) if k.arg not in SEED_ARGS]
        if name.endswith("DataLoader") and any(k.arg in SHARD_ARGS for k in node.keywords):
            kept = [k.value for k in node.keywords if k.arg in SHARD_ARGS]
            args = self._all(arg_of, kept)
        else:
            args = self._all(arg_of, [*node.args, *kept])
        if name == "range":
            return self._range(node, args)
        if isinstance(node.func, ast.Attribute):
            receiver = node.func.value
            recv_taint = arg_of(receiver)
            if node.func.attr in DATA_METHODS:
                key = key_of(receiver)
                if key is not None and key in self.env.uniform:
                    return stronger(recv_taint, args)
                return stronger(stronger(recv_taint, Taint(TaintKind.DATA, line)), args)
            args = stronger(recv_taint, args)
        if known or args is None:
            return args
        return args.unseen_through(f"`{short(node.func)}()`")

    def explicit_of(self, node: ast.expr) -> Taint | None:
        """The taint a value carries by itself, not by the path that set it (what an unknown
        call can be given: whether an object exists on a rank says nothing of what the call
        makes of it)."""
        t = self.of(node)
        return None if t is None or t.implicit else t

    @staticmethod
    def _all(of: Callable[[ast.expr], Taint | None], nodes: list[ast.expr]) -> Taint | None:
        result: Taint | None = None
        for n in nodes:
            result = stronger(result, of(n))
        return result

    def _user_result(self, call: ast.Call, info: object) -> Taint | None:
        """What a linted function's result carries: its own taint (the summary), and the taint
        of each argument whose parameter reaches its return value (through what lint cannot
        see when the summary says so)."""
        return self.user_result(call, info, getattr(info, "returns", None))

    def user_result(self, call: ast.Call, info: object, own: Taint | None) -> Taint | None:
        """What a linted function's result (or one item of it) carries, given the summary's
        taint ``own`` of it. A result that differs only by the path taken inside the function
        (an implicit flow) is not carried: which path a helper takes is its own business, and
        an error needs a value on a definite path."""
        if own is None:
            return None
        result = None if own.kind == TaintKind.PARAM or own.implicit else \
            replace(own, params=frozenset())
        if own.params:
            bound = bound_arguments(call, getattr(info, "node"), getattr(info, "cls") is not None)
            for param in own.params:
                arg = bound.get(param)
                if arg is None:
                    continue
                t = self.explicit_of(arg) if own.unseen else self.of(arg)
                if t is not None and t.state:
                    continue  # an object handed in: the function reads its attributes
                if t is not None and own.unseen:
                    t = t.unseen_through(own.unseen)
                result = stronger(result, t)
        return result

    def _listing(self, node: ast.Call, line: int) -> Taint | None:
        """A directory's listing: as the path is (every rank lists the same directory, or the
        function's own argument while it is summarised), what this rank finds where the path
        differs between ranks."""
        where = self.all_of([*node.args, *(k.value for k in node.keywords)])
        if isinstance(node.func, ast.Attribute) and node.func.attr in LISTING_METHODS:
            where = stronger(where, self.of(node.func.value))
        if where is None or not where.divergent():
            return where
        return Taint(TaintKind.FILESYSTEM, line)

    def _IfExp(self, node: ast.IfExp) -> Taint | None:
        """``a if test else b``: what either side holds, and the test, except a test on what a
        rank finds on disk or an error it caught, which picks a side as an ``if`` statement
        does (lint/flow.py SETUP_KINDS) unless both sides are flags (``True if ... else
        False``)."""
        sides = stronger(self.of(node.body), self.of(node.orelse))
        test = self.of(node.test)
        flags = all(isinstance(v, ast.Constant) and isinstance(v.value, bool)
                    for v in (node.body, node.orelse))
        if test is not None and test.kind in SETUP_KINDS and not flags:
            return sides
        return stronger(test, sides)

    def _range(self, node: ast.Call, args: Taint | None) -> Taint | None:
        if args is not None and len(node.args) >= 2 and args.kind == TaintKind.RANK:
            return replace(args, kind=TaintKind.SHARD, implicit=False)
        if args is not None and args.kind == TaintKind.WORLD and len(node.args) == 3 and \
                self._strides_by_world(node.args[2]):
            self.on_world_split(node.lineno)
        return args

    def _strides_by_world(self, step: ast.expr | None) -> bool:
        """A step of the world size: every world-th item (a split, if it starts at the rank)."""
        t = self.of(step)
        return t is not None and t.kind == TaintKind.WORLD

    def _source_taint(self, node: ast.Call, name: str, line: int) -> Taint | None:
        """The taint a call creates by itself, whatever its arguments."""
        if name in RANK_CALLS:
            return Taint(TaintKind.RANK, line)
        if name in WORLD_CALLS:
            return Taint(TaintKind.WORLD, line)
        attr = node.func.attr if isinstance(node.func, ast.Attribute) else ""
        if attr in RANK_METHODS and name not in WORLD_CALLS:
            return Taint(TaintKind.RANK, line)
        if attr in WORLD_METHODS:
            return Taint(TaintKind.WORLD, line)
        if name in FS_CALLS or attr in FS_METHODS:
            return Taint(TaintKind.FILESYSTEM, line)
        if name in LISTING_CALLS or attr in LISTING_METHODS:
            return self._listing(node, line)
        if name in TIME_CALLS:
            return Taint(TaintKind.TIME, line)
        if name in DATA_CALLS:  # isnan(x): as rank-local as x (a reduced value is not)
            args = self.all_of(node.args)
            return args if args is not None or node.args else Taint(TaintKind.DATA, line)
        if name.startswith(RANDOM_PREFIXES) and name.rsplit(".", 1)[-1] not in RANDOM_EXEMPT:
            return Taint(TaintKind.RANDOM, line)
        if name in TORCH_RANDOM and not any(k.arg == "generator" for k in node.keywords):
            return Taint(TaintKind.RANDOM, line)
        return None
