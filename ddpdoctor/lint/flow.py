"""DataFlow: what a function's statements do to the values that differ between ranks: taint
through assignments and mutations, values made uniform by a collective, what objects names hold,
and the facts the file-wide rules need (seeds, loaders, splits)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field, replace
from typing import Callable

from ddpdoctor.lint.attributes import carried, class_of
from ddpdoctor.lint.object_flow import bind_call
from ddpdoctor.lint.collectives import (BEFORE_DDP, IN_PLACE_UNIFORM, Site, call_kinds,
                                        dist_op, is_ddp_wrap, uniform_result)
from ddpdoctor.lint.framework_objects import annotated_kind, object_kinds, unpacked_kinds
from ddpdoctor.lint.known_calls import known_call
from ddpdoctor.lint.module import ParsedModule, own
from ddpdoctor.lint.rules import Draft, rank_dependent_model, unused_parameters
from ddpdoctor.lint.rules.seed_collision import LoaderCall, SeedCall, seed_families
from ddpdoctor.lint.state_checks import SIZED, StateChecks
from ddpdoctor.lint.program import Program
from ddpdoctor.lint.summaries import SiteScanner
from ddpdoctor.lint.taint_eval import BuiltObject, TaintEval
from ddpdoctor.lint.taint import SETUP_KINDS, Env, Taint, TaintKind, key_of, share_sized, \
    stronger
from ddpdoctor.lint.uniformity import device_move, is_device, same_iteration, strip_wrappers

WRAP_WORDS = ("distributeddataparallel", "fullyshardeddataparallel", "auto_model")
MUTATORS = frozenset({"append", "extend", "update", "add", "insert", "setdefault",
                      "appendleft", "__setitem__"})


@dataclass
class ModuleFacts:
    """What the walk of one file found for the file-wide rules."""

    seeds: list[SeedCall] = field(default_factory=list)
    loaders: list[LoaderCall] = field(default_factory=list)
    world_splits: set[int] = field(default_factory=set)
    uneven_loops: dict[int, Taint] = field(default_factory=dict)  # id(for loop) -> why


@dataclass
class Control:
    """A condition the current statement runs under."""

    taint: Taint
    line: int
    depth: int  # how many blocks were open when it began
    jumps_only: bool = False  # decides where the rank jumps, not what it assigns


@dataclass
class Frame:
    """An open block: its statements, where we are in it, and whether it is a loop's body."""

    stmts: list[ast.stmt]
    index: int
    loop: bool


@dataclass
class DataFlow(StateChecks):
    """The state of one function's walk and the data-flow half of it (see FunctionWalker)."""

    program: Program
    module: ParsedModule
    cls: str | None
    env: Env
    report: Callable[[Draft], None]
    facts: ModuleFacts
    dataset_classes: set[str]
    quiet: bool = False
    returns: Taint | None = None
    control: list[Control] = field(default_factory=list)
    frames: list[Frame] = field(default_factory=list)
    no_grad: bool = False
    no_sync: bool = False
    in_join: bool = False
    nested_defs: bool = True  # walk functions defined inside (False at a module's top level)
    passthrough: bool = False  # every return hands back the same argument
    ddp_seen: bool = False  # this walk has met the model wrapped in DDP (a wrap, a DDP param)
    summary: bool = False  # a summary's walk: parameters are followed to the return value
    catching: int = 0  # how many try blocks with handlers the statement is in
    returns_elts: list[Taint | None] | None = None  # a tuple return's items ([]: mixed)
    single_process: bool = False  # on the side of a test that runs without a process group

    # -- helpers ------------------------------------------------------------------------------
    def mark_before_ddp(self, stmts: list[ast.stmt]) -> None:
        """A scope that wraps a model in DDP itself: a backward before the wrap is a plain
        autograd backward (no gradient all-reduce yet)."""
        if not self.module.mentions_words(self.module.tree, WRAP_WORDS):
            return
        for stmt in stmts:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            for n in [stmt, *own(stmt)]:
                if isinstance(n, ast.Call) and is_ddp_wrap(n, self.module):
                    self.env.before_ddp = True
                    return

    def taint_of(self, node: ast.expr | None) -> Taint | None:
        return TaintEval(self.module, self.env, self._callee, self._uniform_call,
                         self._world_split).of(node)

    def _callee(self, call: ast.Call) -> object:
        """The linted function ``call`` reaches, or the linted class it builds, or None."""
        callee = self.program.resolve(call, self.module, self.cls)
        if callee is not None:
            return callee
        cls = self.program.resolve_class(call, self.module)
        if cls is None:
            return None
        state: Taint | None = None
        for t in self.program.objects.class_attrs(self.module.path, cls.name).values():
            state = stronger(state, t)
        return BuiltObject(cls, replace(state, state=True) if state is not None else None)

    def _uniform_call(self, call: ast.Call) -> bool:
        return uniform_result(call, self.module, self.env.kinds)

    def _world_split(self, line: int) -> None:
        if not self.quiet:
            self.facts.world_splits.add(line)

    def sites(self, stmts: list[ast.stmt]) -> list[Site]:
        """The collectives ``stmts`` issue, in order, in the current grad/no_sync state
        (a DDP model they build themselves counts as one)."""
        kinds = self.env.kinds
        built = {key: found for stmt in stmts for key, found in self.built_by(stmt)}
        if built:
            kinds = {**kinds, **built}
        if self.env.before_ddp:
            kinds = {**kinds, BEFORE_DDP: frozenset({BEFORE_DDP})}
        return SiteScanner(self.program, self.module, kinds, self.cls).scan(
            stmts, self.no_grad, self.no_sync)

    def built_by(self, stmt: ast.stmt) -> list[tuple[str, frozenset[str]]]:
        """The objects lint knows (call_kinds) a statement assigns to names, kept per statement
        on the file."""
        cache = self.module.__dict__.setdefault("_built_by", {})
        found = cache.get(id(stmt))
        if found is None:
            found = cache[id(stmt)] = [
                (key, kinds) for node in [stmt, *own(stmt)]
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                for kinds in [call_kinds(node.value, self.module)] if kinds
                for key in map(key_of, node.targets) if key is not None]
        return found

    def control_taint(self, flag: bool = False) -> Taint | None:
        """The strongest condition the current statement runs under (an implicit flow);
        ``flag``: a True/False constant is assigned, which records what happened (a file found,
        an error caught), so those conditions count too."""
        result: Taint | None = None
        for c in self.control:
            if not c.jumps_only and (flag or c.taint.kind not in SETUP_KINDS):
                result = stronger(result, c.taint)
        return result.as_implicit() if result is not None else None

    def emit(self, draft: Draft | None) -> None:
        if draft is not None and not self.quiet:
            self.report(draft)

    def trip_taint(self, it: ast.expr) -> Taint | None:
        """What the number (and order) of a loop's iterations depends on: a container's
        length and keys, not what it holds (``for k in sorted(d)``, ``for x in xs``), through
        length-preserving wrappers (``tqdm(x, disable=...)``, ``enumerate``, ``tqdm(x) if
        is_main else x``), a dict literal's keys."""
        while True:
            if isinstance(it, ast.IfExp) and same_iteration(it.body, it.orelse):
                it = it.body
            elif isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and \
                    it.func.attr in ("items", "keys", "values") and not it.args:
                it = it.func.value
            elif isinstance(it, ast.Call) and strip_wrappers(it) is not it:
                it = strip_wrappers(it)
            else:
                break
        if isinstance(it, ast.Dict):
            return stronger(self.taint_of(ast.Tuple([k for k in it.keys if k is not None])),
                            self.control_taint())
        key = key_of(it)
        if key is not None and key in self.env.shapes:
            return self.env.shape(key)
        return self.taint_of(it)

    def shape_of(self, value: ast.expr) -> Taint | None:
        """What a new value's length or keys depend on: a call's result (``loss_dict =
        model(batch)``) has the length and keys its code gives it, whatever the data; a
        result that differs by rank (``x, y = shard(rank)``) is sized as a rank's share of the
        data (shares are often even), not by the rank itself."""
        t = self.trip_taint(value)
        if isinstance(value, ast.Call) and t is not None and t.kind == TaintKind.DATA:
            return None
        return share_sized(t) if isinstance(value, ast.Call) and \
            not known_call(self.module.qualified(value.func) or "", value) else t

    # -- assignments ----------------------------------------------------------------------------
    def visit_Assign(self, stmt: ast.Assign) -> None:
        self.calls_in(stmt.value)
        if any(isinstance(t, ast.Attribute) and t.attr == "requires_grad" and
               not self.is_tensor(t.value) for t in stmt.targets):
            self.model_change(stmt.lineno, "requires_grad")
        flag = isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, bool)
        t = stronger(self.taint_of(stmt.value), self.control_taint(flag))
        for target in stmt.targets:
            self.assign(target, t, stmt.value)
            if not self.quiet:
                self.check_assign_target(target, stmt.lineno)

    def visit_AnnAssign(self, stmt: ast.AnnAssign) -> None:
        if stmt.value is not None:
            self.calls_in(stmt.value)
            self.assign(stmt.target, stronger(self.taint_of(stmt.value), self.control_taint()),
                        stmt.value)
        kind = annotated_kind(stmt.annotation, self.module)
        key = key_of(stmt.target)
        if kind is not None and key is not None:  # trainer: L.Trainer = build(cfg)
            self.env.kinds[key] = frozenset({kind})

    def visit_AugAssign(self, stmt: ast.AugAssign) -> None:
        self.calls_in(stmt.value)
        t = stronger(self.taint_of(stmt.value), self.control_taint())
        # ``xs += v`` may grow xs; ``d[k] += v`` only changes what d[k] holds; a tensor's
        # in-place arithmetic (``total += loss``) never changes its shape
        grows = not isinstance(stmt.target, ast.Subscript) and not self.is_tensor(stmt.target)
        self.mix(stmt.target, t, t if grows else None)

    def is_tensor(self, node: ast.expr) -> bool:
        """A name that holds a tensor lint saw built (``torch.zeros(n)``): writes into it
        (``x += v``, ``x[i] = v``) change its values, never its shape."""
        while isinstance(node, ast.Subscript):
            node = node.value
        key = key_of(node)
        return key is not None and SIZED in self.env.kinds.get(key, frozenset())

    def mix(self, target: ast.expr, t: Taint | None, shape: Taint | None = None) -> None:
        """The target keeps its taint and takes ``t`` too (``x += v``, ``xs.append(v)``);
        ``shape`` is what its length or keys now depend on as well."""
        while isinstance(target, ast.Subscript):
            target = target.value
        key = key_of(target)
        if key is None:
            return
        self.into_object(target, t)
        t = self.object_state(key, t)
        if t is not None:
            self.env.taints[key] = stronger(self.env.taints.get(key), t)  # type: ignore[assignment]
            self.env.uniform.discard(key)
        if shape is not None and key in self.env.shapes:
            self.env.shapes[key] = stronger(self.env.shapes[key], shape)

    def assign(self, target: ast.expr, t: Taint | None, value: ast.expr | None) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            values = value.elts if isinstance(value, (ast.Tuple, ast.List)) and \
                len(value.elts) == len(target.elts) else None
            items = self.unpacked(value, len(target.elts), t) if values is None else []
            for i, elt in enumerate(target.elts):
                if values is not None:
                    sub = stronger(self.taint_of(values[i]), self.control_taint())
                    self.assign(elt, sub, values[i])
                else:
                    self.assign(elt, items[i], None)
            if isinstance(value, ast.Call) and values is None:
                self.unpack_kinds(target, value)
                self.env.kinds.update(unpacked_kinds(target.elts, value, self.module))
            return
        if isinstance(target, ast.Starred):
            self.assign(target.value, t, None)
            return
        if isinstance(target, ast.Subscript):  # d[k] = v: a new key k, perhaps (not in a tensor)
            self.mix(target, t, None if self.is_tensor(target) else
                     stronger(self.taint_of(target.slice), self.control_taint()))
            return
        key = key_of(target)
        if key is None:
            return
        t = self.object_state(key, t)
        if t is None:
            self.env.taints.pop(key, None)
        else:
            self.env.taints[key] = t
        self.env.shapes[key] = share_sized(t) if value is None else \
            stronger(self.shape_of(value), self.control_taint())
        self.env.uniform.discard(key)
        if isinstance(value, ast.Call) and self._uniform_call(value):
            self.env.uniform.add(key)
        self.env.kinds[key] = self.kinds_of(value)
        self.into_object(target, t)
        if isinstance(target, ast.Name):
            self.new_object(key)
        if value is not None:
            self.track_tensor(key, value)

    def unpacked(self, value: ast.expr | None, n: int, whole: Taint | None) \
            -> list[Taint | None]:
        """The taint of each of ``n`` names a value is unpacked into: item by item for a
        linted function that returns tuples of that length; else each takes the whole's
        taint, which then passes through what lint cannot follow item by item."""
        if isinstance(value, ast.Call):
            callee = self.program.resolve(value, self.module, self.cls)
            elts = callee.returns_elts if callee is not None else None
            if elts and len(elts) == n:
                evaluate = TaintEval(self.module, self.env, self._callee, self._uniform_call,
                                     self._world_split)
                control = self.control_taint()
                return [stronger(evaluate.user_result(value, callee, e), control) for e in elts]
        if whole is None or not whole.definite() or value is None:
            return [whole] * n
        what = f"an item of `{ast.unparse(value)[:40]}`"
        return [whole.unseen_through(what)] * n

    @staticmethod
    def object_state(key: str, t: Taint | None) -> Taint | None:
        """The taint another object's attribute keeps (``args.x = v``: the rank's alone)."""
        owner, dot, _ = key.partition(".")
        return carried(t) if dot and owner not in ("self", "cls") else t

    def into_object(self, target: ast.expr, t: Taint | None) -> None:
        """``self.x = v``, ``obj.x = v``: objects of the class may hold ``v`` in ``x``."""
        if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)):
            return
        owner = target.value.id
        cls = self.cls if owner == "self" else \
            class_of(self.env.kinds.get(owner, frozenset()))
        if cls is not None:
            self.program.objects.add_attr(self.module.path, cls, target.attr, t)

    def new_object(self, name: str) -> None:
        """``name`` holds a new value: what was known of its attributes goes; an object of
        one of the file's classes starts with the attributes its class may hold tainted."""
        prefix = name + "."
        for table in (self.env.taints, self.env.shapes):
            for k in [k for k in table if k.startswith(prefix)]:
                del table[k]
        self.env.uniform = {k for k in self.env.uniform if not k.startswith(prefix)}
        cls = class_of(self.env.kinds.get(name, frozenset()))
        if cls is not None:
            for attr, t in self.program.objects.class_attrs(self.module.path, cls).items():
                self.env.taints[prefix + attr] = t

    def kinds_of(self, value: ast.expr | None) -> frozenset[str]:
        if is_device(value, self.module):
            return frozenset({"device"})
        if isinstance(value, ast.Call):
            found = call_kinds(value, self.module)
            name = self.module.qualified(value.func) or ""
            if name.rsplit(".", 1)[-1] in self.dataset_classes:
                found |= {f"dataset:{name.rsplit('.', 1)[-1]}"}
            if name in self.module.classes():
                found |= {f"class:{name}"}
            if "ddp" in found:
                quiet = any(k.arg == "broadcast_buffers" for k in value.keywords)
                for arg in value.args[:1]:
                    while isinstance(arg, ast.Call) and device_move(arg) is not None:
                        arg = device_move(arg)  # DDP(model.cuda(gpu)): the model's kinds
                    k = key_of(arg)
                    if k is not None:
                        inherit = {"syncbn"} if quiet else {"syncbn", "buffers"}
                        found |= self.env.kinds.get(k, frozenset()) & inherit
            return found
        k = key_of(value) if value is not None else None
        found = self.env.kinds.get(k, frozenset()) if k else frozenset()
        if not found and isinstance(value, ast.Attribute):
            found = object_kinds(value, self.env.kinds)  # trainer = self.trainer
        return found

    def unpack_kinds(self, target: ast.Tuple | ast.List, value: ast.Call) -> None:
        """``model, opt, loader = accelerator.prepare(model, opt, loader)``: the model is DDP."""
        if not (isinstance(value.func, ast.Attribute) and value.func.attr == "prepare"):
            return
        for elt, arg in zip(target.elts, value.args):
            key = key_of(elt)
            if key is None:
                continue
            kinds = self.kinds_of(arg)  # what the argument was built as, not what it is called
            if kinds & {"loader", "optimizer", "scheduler"}:
                self.env.kinds[key] = kinds
            else:
                self.env.kinds[key] = frozenset({"ddp", "model"})

    # -- calls inside simple statements ---------------------------------------------------------
    def calls_in(self, node: ast.AST) -> None:
        """Calls that change what we know: in-place collectives, mutators, seeds, loaders."""
        if isinstance(node, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return
        for n in [node, *own(node)]:
            if isinstance(n, ast.Call):
                self.on_call(n)

    def on_call(self, call: ast.Call) -> None:
        if not self.quiet:
            self.check_shape(call)
            self.check_log(call)
            self.check_replica(call)
        self.feed_state(call)
        bind_call(self.program, self.module, self.cls, call, self.taint_of)
        op = dist_op(call, self.module)
        if op in IN_PLACE_UNIFORM and call.args:
            key = key_of(call.args[0])
            if key is not None:
                self.env.taints.pop(key, None)
                self.env.shapes.pop(key, None)
                self.env.uniform.add(key)
            return
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr in rank_dependent_model.MODEL_CHANGES \
                and not self.is_tensor(func.value):  # a tensor the rank built is no model
            self.model_change(call.lineno, func.attr)
        if isinstance(func, ast.Attribute) and func.attr in MUTATORS:
            t = stronger(self.all_taint(call), self.control_taint())
            grows = t if func.attr in ("extend", "update") else self.control_taint()
            self.mix(func.value, t, grows)
        families = seed_families(call, self.module)
        if families is not None and not self.quiet:
            per_rank = self.all_taint(call)
            self.facts.seeds.append(SeedCall(families, call.lineno,
                                             per_rank is not None and per_rank.divergent()))
        if not self.quiet:
            self.loader_fact(call)
            if is_ddp_wrap(call, self.module) and call.args:
                self.wrapped_class(call)
        if is_ddp_wrap(call, self.module):
            self.env.before_ddp = False
            self.ddp_seen = True

    def wrapped_class(self, ddp: ast.Call) -> None:
        """The file's module class a DDP wraps, checked for parameters a forward skips."""
        arg = ddp.args[0]
        name = None
        if isinstance(arg, ast.Call):
            name = (self.module.qualified(arg.func) or "").rsplit(".", 1)[-1]
        elif key_of(arg) is not None:
            labels = self.env.kinds.get(key_of(arg) or "", frozenset())
            name = next((lb.split(":", 1)[1] for lb in labels if lb.startswith("class:")), None)
        cls = self.module.classes().get(name or "")
        if cls is not None:
            self.emit(unused_parameters.check(cls, ddp, self.module))

    def model_change(self, line: int, what: str) -> None:
        rank = next((c for c in reversed(self.control) if c.taint.is_rank()), None)
        if rank is not None:
            self.emit(rank_dependent_model.check(line, what, rank.line))

    def all_taint(self, call: ast.Call) -> Taint | None:
        result: Taint | None = None
        for a in [*call.args, *(k.value for k in call.keywords)]:
            result = stronger(result, self.taint_of(a))
        return result

    def loader_fact(self, call: ast.Call) -> None:
        name = self.module.qualified(call.func) or ""
        if not name.endswith("DataLoader"):
            return
        ds = call.args[0] if call.args else next(
            (k.value for k in call.keywords if k.arg == "dataset"), None)
        cls = None
        if isinstance(ds, ast.Call):
            cls = (self.module.qualified(ds.func) or "").rsplit(".", 1)[-1]
        elif ds is not None and key_of(ds) is not None:
            labels = self.env.kinds.get(key_of(ds) or "", frozenset())
            cls = next((lb.split(":", 1)[1] for lb in labels if lb.startswith("dataset:")), None)
        if cls not in self.dataset_classes:
            return
        kw = {k.arg: k.value for k in call.keywords if k.arg}
        workers = "num_workers" in kw and not (isinstance(kw["num_workers"], ast.Constant)
                                               and not kw["num_workers"].value)
        gen = kw.get("generator")
        gen_taint = self.taint_of(gen) if gen is not None else None
        self.facts.loaders.append(LoaderCall(
            call.lineno, cls, workers, "worker_init_fn" in kw and not (
                isinstance(kw["worker_init_fn"], ast.Constant) and kw["worker_init_fn"].value is None),
            gen is not None, gen_taint is not None and gen_taint.divergent()))
