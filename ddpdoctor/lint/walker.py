"""FunctionWalker: one pass over a function in execution order, tracking which values differ
between ranks and which collectives each path issues, and asking the rules at each branch."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Callable

from ddpdoctor.lint.collectives import (IN_PLACE_UNIFORM, call_kinds, dist_op, receiver_name,
                                        uniform_result)
from ddpdoctor.lint.module import ParsedModule
from ddpdoctor.lint.rules import Draft, conditional_collective, divergent_skip, \
    rank_dependent_loop, rank_dependent_model, recv_before_send
from ddpdoctor.lint.rules.seed_collision import LoaderCall, SeedCall, seed_families
from ddpdoctor.lint.summaries import (MODEL_PARAMS, FunctionInfo, Program, SiteScanner,
                                      rank_decorator, with_flags)
from ddpdoctor.lint.taint import (RANK_NAMES, WORLD_NAMES, Env, Taint, TaintEval, TaintKind,
                                  key_of, stronger)

MUTATORS = frozenset({"append", "extend", "update", "add", "insert", "setdefault",
                      "appendleft", "__setitem__"})
LOADER_WORDS = ("loader", "batches")
JOIN_CALLS = ("Join", "join", "join_uneven_inputs")


@dataclass
class ModuleFacts:
    """What the walk of one file found for the file-wide rules."""

    seeds: list[SeedCall] = field(default_factory=list)
    loaders: list[LoaderCall] = field(default_factory=list)
    world_splits: set[int] = field(default_factory=set)


@dataclass
class Control:
    """A condition the current statement runs under."""

    taint: Taint
    line: int
    depth: int  # how many blocks were open when it began


@dataclass
class Frame:
    """An open block: its statements, where we are in it, and whether it is a loop's body."""

    stmts: list[ast.stmt]
    index: int
    loop: bool


@dataclass
class FunctionWalker:
    """Walks one function (or a module's top level) and reports drafts through ``report``."""

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

    # -- helpers ------------------------------------------------------------------------------
    def taint_of(self, node: ast.expr | None) -> Taint | None:
        return TaintEval(self.module, self.env, self._returns, self._uniform_call,
                         self._world_split).of(node)

    def _returns(self, call: ast.Call) -> Taint | None:
        callee = self.program.resolve(call, self.module, self.cls)
        return callee.returns if callee is not None else None

    def _uniform_call(self, call: ast.Call) -> bool:
        return uniform_result(call, self.module, self.env.kinds)

    def _world_split(self, line: int) -> None:
        if not self.quiet:
            self.facts.world_splits.add(line)

    def scanner(self) -> SiteScanner:
        return SiteScanner(self.program, self.module, self.env.kinds, self.cls)

    def sites(self, stmts: list[ast.stmt]):
        return self.scanner().scan(stmts, self.no_grad, self.no_sync)

    def control_taint(self) -> Taint | None:
        result: Taint | None = None
        for c in self.control:
            result = stronger(result, c.taint)
        return result

    def emit(self, draft: Draft | None) -> None:
        if draft is not None and not self.quiet:
            self.report(draft)

    # -- entry points ---------------------------------------------------------------------------
    def walk_function(self, info: FunctionInfo | None, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.seed_params(node)
        dec = rank_decorator(node)
        if dec is not None:
            t = Taint(TaintKind.RANK, dec.lineno)
            self.emit(conditional_collective.check(t, dec.lineno, self.sites(node.body), []))
            self.control.append(Control(t, dec.lineno, 0))
        self.block(node.body)
        if info is not None:
            info.returns = stronger(info.returns, self.returns) if self.quiet else info.returns

    def seed_params(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
        spawned = node.name in self.program.spawn_targets
        has_ddp = self.module.path in self.program.ddp_modules
        for i, arg in enumerate(args):
            self.env.uniform.discard(arg.arg)
            self.env.kinds.pop(arg.arg, None)
            self.env.taints.pop(arg.arg, None)
            if arg.arg in RANK_NAMES or (spawned and i == 0):
                self.env.taints[arg.arg] = Taint(TaintKind.RANK, node.lineno)
            elif arg.arg in WORLD_NAMES:
                self.env.taints[arg.arg] = Taint(TaintKind.WORLD, node.lineno)
            if has_ddp and arg.arg in MODEL_PARAMS:
                self.env.kinds[arg.arg] = frozenset({"ddp"})

    # -- blocks -------------------------------------------------------------------------------
    def block(self, stmts: list[ast.stmt], loop: bool = False) -> None:
        paired = self.complement_pairs(stmts)
        if not any(c.taint.kind == TaintKind.RANK for c in self.control):
            self.emit(recv_before_send.check(stmts, self.module))
        frame = Frame(stmts, 0, loop)
        self.frames.append(frame)
        try:
            for i, stmt in enumerate(stmts):
                frame.index = i
                if isinstance(stmt, ast.If):
                    self.visit_if(stmt, id(stmt) in paired)
                else:
                    self.visit(stmt)
        finally:
            self.frames.pop()

    def visit(self, stmt: ast.stmt) -> None:
        handler = getattr(self, f"visit_{type(stmt).__name__}", None)
        if handler is not None:
            handler(stmt)
        else:
            self.calls_in(stmt)

    # -- assignments ----------------------------------------------------------------------------
    def visit_Assign(self, stmt: ast.Assign) -> None:
        self.calls_in(stmt.value)
        if any(isinstance(t, ast.Attribute) and t.attr == "requires_grad" for t in stmt.targets):
            self.model_change(stmt.lineno, "requires_grad")
        t = stronger(self.taint_of(stmt.value), self.control_taint())
        for target in stmt.targets:
            self.assign(target, t, stmt.value)

    def visit_AnnAssign(self, stmt: ast.AnnAssign) -> None:
        if stmt.value is not None:
            self.calls_in(stmt.value)
            self.assign(stmt.target, stronger(self.taint_of(stmt.value), self.control_taint()),
                        stmt.value)

    def visit_AugAssign(self, stmt: ast.AugAssign) -> None:
        self.calls_in(stmt.value)
        t = stronger(self.taint_of(stmt.value), self.control_taint())
        self.mix(stmt.target, t)

    def mix(self, target: ast.expr, t: Taint | None) -> None:
        """The target keeps its taint and takes ``t`` too (``x += v``, ``xs.append(v)``)."""
        while isinstance(target, ast.Subscript):
            target = target.value
        key = key_of(target)
        if key is not None and t is not None:
            self.env.taints[key] = stronger(self.env.taints.get(key), t)  # type: ignore[assignment]
            self.env.uniform.discard(key)

    def assign(self, target: ast.expr, t: Taint | None, value: ast.expr | None) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            values = value.elts if isinstance(value, (ast.Tuple, ast.List)) and \
                len(value.elts) == len(target.elts) else None
            for i, elt in enumerate(target.elts):
                if values is not None:
                    sub = stronger(self.taint_of(values[i]), self.control_taint())
                    self.assign(elt, sub, values[i])
                else:
                    self.assign(elt, t, None)
            if isinstance(value, ast.Call) and values is None:
                self.unpack_kinds(target, value)
            return
        if isinstance(target, ast.Starred):
            self.assign(target.value, t, None)
            return
        if isinstance(target, ast.Subscript):
            self.mix(target, t)
            return
        key = key_of(target)
        if key is None:
            return
        if t is None:
            self.env.taints.pop(key, None)
        else:
            self.env.taints[key] = t
        self.env.uniform.discard(key)
        if isinstance(value, ast.Call) and self._uniform_call(value):
            self.env.uniform.add(key)
        self.env.kinds[key] = self.kinds_of(value)

    def kinds_of(self, value: ast.expr | None) -> frozenset[str]:
        if isinstance(value, ast.Call):
            found = call_kinds(value, self.module)
            name = self.module.qualified(value.func) or ""
            if name.rsplit(".", 1)[-1] in self.dataset_classes:
                found |= {f"dataset:{name.rsplit('.', 1)[-1]}"}
            if "ddp" in found:
                quiet = any(k.arg == "broadcast_buffers" for k in value.keywords)
                for arg in value.args[:1]:
                    k = key_of(arg)
                    if k is not None:
                        inherit = {"syncbn"} if quiet else {"syncbn", "buffers"}
                        found |= self.env.kinds.get(k, frozenset()) & inherit
            return found
        k = key_of(value) if value is not None else None
        return self.env.kinds.get(k, frozenset()) if k else frozenset()

    def unpack_kinds(self, target: ast.Tuple | ast.List, value: ast.Call) -> None:
        """``model, opt, loader = accelerator.prepare(model, opt, loader)``: the model is DDP."""
        if not (isinstance(value.func, ast.Attribute) and value.func.attr == "prepare"):
            return
        for elt, arg in zip(target.elts, value.args):
            key = key_of(elt)
            text = ast.unparse(arg).lower()
            if key is None:
                continue
            if any(w in text for w in LOADER_WORDS):
                self.env.kinds[key] = frozenset({"loader"})
            elif not any(w in text for w in ("opt", "sched", "data")):
                self.env.kinds[key] = frozenset({"ddp", "model"})

    # -- calls inside simple statements ---------------------------------------------------------
    def calls_in(self, node: ast.AST) -> None:
        """Calls that change what we know: in-place collectives, mutators, seeds, loaders."""
        stack = [node]
        while stack:
            n = stack.pop()
            if isinstance(n, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(n, ast.Call):
                self.on_call(n)
            stack.extend(ast.iter_child_nodes(n))

    def on_call(self, call: ast.Call) -> None:
        op = dist_op(call, self.module)
        if op in IN_PLACE_UNIFORM and call.args:
            key = key_of(call.args[0])
            if key is not None:
                self.env.taints.pop(key, None)
                self.env.uniform.add(key)
            return
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr in rank_dependent_model.MODEL_CHANGES:
            self.model_change(call.lineno, func.attr)
        if isinstance(func, ast.Attribute) and func.attr in MUTATORS:
            t = stronger(self.all_taint(call), self.control_taint())
            self.mix(func.value, t)
        families = seed_families(call, self.module)
        if families is not None and not self.quiet:
            per_rank = self.all_taint(call)
            self.facts.seeds.append(SeedCall(families, call.lineno,
                                             per_rank is not None and per_rank.divergent()))
        if not self.quiet:
            self.loader_fact(call)

    def model_change(self, line: int, what: str) -> None:
        rank = next((c for c in reversed(self.control) if c.taint.kind == TaintKind.RANK), None)
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

    # -- branches -------------------------------------------------------------------------------
    def divergent(self, node: ast.expr) -> Taint | None:
        self.calls_in(node)
        t = self.taint_of(node)
        return t if t is not None and t.divergent() else None

    def visit_if(self, stmt: ast.If, paired: bool = False) -> None:
        t = self.divergent(stmt.test)
        if t is not None and not paired:
            body, orelse = self.sites(stmt.body), self.sites(stmt.orelse)
            frame = self.frames[-1]
            rest = frame.stmts[frame.index + 1:]
            skip_rule = False  # a jump with no collective of its own: the skip rule reports
            if ends_in_jump(stmt.body) and not ends_in_jump(stmt.orelse):
                orelse += self.sites(rest)  # the other path goes on past the if
                skip_rule = not body
            elif ends_in_jump(stmt.orelse) and not ends_in_jump(stmt.body):
                body += self.sites(rest)
                skip_rule = not orelse
            membership = isinstance(stmt.test, ast.Compare) and \
                isinstance(stmt.test.ops[0], (ast.In, ast.NotIn))
            if not skip_rule:
                self.emit(conditional_collective.check(t, stmt.lineno, body, orelse, membership))
        self.branches(t, stmt.lineno, [stmt.body, stmt.orelse])

    def branches(self, t: Taint | None, line: int, bodies: list[list[ast.stmt]],
                 loop: bool = False) -> None:
        if t is not None:
            self.control.append(Control(t, line, len(self.frames)))
        start = self.env
        merged: Env | None = None
        for body in bodies:
            self.env = start.copy()
            self.block(body, loop)
            merged = self.env if merged is None else merged.merge(self.env)
        self.env = merged if merged is not None else start
        if t is not None:
            self.control.pop()

    def visit_For(self, stmt: ast.For | ast.AsyncFor) -> None:
        self.calls_in(stmt.iter)
        t = self.taint_of(stmt.iter)
        t = t if t is not None and t.divergent() else None
        self.loop(stmt, t)

    visit_AsyncFor = visit_For

    def loop_targets(self, stmt: ast.For | ast.AsyncFor, t: Taint | None) -> None:
        it = stmt.iter
        inner = it.args[0] if isinstance(it, ast.Call) and it.args and \
            receiver_name(it.func) in ("enumerate", "tqdm") else it
        data = self.loader_like(inner)
        item = stronger(stronger(t, Taint(TaintKind.DATA, stmt.lineno) if data else None),
                        self.control_taint())
        if isinstance(it, ast.Call) and receiver_name(it.func) == "enumerate" and \
                isinstance(stmt.target, ast.Tuple) and len(stmt.target.elts) == 2:
            self.assign(stmt.target.elts[0], stronger(t, self.control_taint()), None)
            self.assign(stmt.target.elts[1], item, None)
        else:
            self.assign(stmt.target, item, None)

    def loader_like(self, node: ast.expr) -> bool:
        key = key_of(node)
        if key is not None and "loader" in self.env.kinds.get(key, frozenset()):
            return True
        text = ast.unparse(node).lower()
        return any(w in text for w in LOADER_WORDS)

    def visit_While(self, stmt: ast.While) -> None:
        self.loop(stmt, None)

    def loop(self, stmt: ast.For | ast.AsyncFor | ast.While, t: Taint | None) -> None:
        before = self.env.copy()
        quiet = self.quiet
        self.quiet = True  # a first pass: what the body taints reaches the header
        self._loop_pass(stmt, t)
        self.quiet = quiet
        self.env = before.merge(self.env)
        if isinstance(stmt, ast.While):
            t = self.divergent(stmt.test)
        if t is not None and not self.in_join:
            self.emit(rank_dependent_loop.check(t, stmt.lineno, self.sites(stmt.body)))
        start = self.env.copy()
        self._loop_pass(stmt, t)
        self.env = start.merge(self.env)
        self.block(stmt.orelse)

    def _loop_pass(self, stmt: ast.For | ast.AsyncFor | ast.While, t: Taint | None) -> None:
        if t is not None:
            self.control.append(Control(t, stmt.lineno, len(self.frames)))
        if not isinstance(stmt, ast.While):
            self.loop_targets(stmt, t)
        self.block(stmt.body, loop=True)
        if t is not None:
            self.control.pop()

    def visit_With(self, stmt: ast.With | ast.AsyncWith) -> None:
        saved = (self.no_grad, self.no_sync, self.in_join)
        for item in stmt.items:
            self.calls_in(item.context_expr)
            if item.optional_vars is not None:
                self.assign(item.optional_vars, self.taint_of(item.context_expr),
                            item.context_expr)
            expr = item.context_expr
            if isinstance(expr, ast.Call) and receiver_name(expr.func) in JOIN_CALLS:
                self.in_join = True
        self.no_grad, self.no_sync = with_flags(stmt.items, self.module, self.no_grad,
                                                self.no_sync)
        self.block(stmt.body)
        self.no_grad, self.no_sync, self.in_join = saved

    visit_AsyncWith = visit_With

    def visit_Try(self, stmt: ast.Try) -> None:
        start = self.env.copy()
        self.block(stmt.body)
        after_body = self.env
        merged = after_body
        for handler in stmt.handlers:
            self.env = start.merge(after_body)
            t = Taint(TaintKind.EXCEPTION, handler.lineno)
            if handler.name:
                self.env.taints[handler.name] = t
            self.control.append(Control(t, handler.lineno, len(self.frames)))
            self.block(handler.body)
            self.control.pop()
            merged = merged.merge(self.env)
        self.env = merged
        self.block(stmt.orelse)
        self.block(stmt.finalbody)

    visit_TryStar = visit_Try

    # -- jumps ----------------------------------------------------------------------------------
    def visit_Return(self, stmt: ast.Return) -> None:
        if stmt.value is not None:
            self.calls_in(stmt.value)
            self.returns = stronger(self.returns, self.taint_of(stmt.value))
        self.returns = stronger(self.returns, self.control_taint())
        self.jump(stmt, "return")

    def visit_Raise(self, stmt: ast.Raise) -> None:
        self.jump(stmt, "raise")

    def visit_Break(self, stmt: ast.Break) -> None:
        self.jump(stmt, "break")

    def visit_Continue(self, stmt: ast.Continue) -> None:
        self.jump(stmt, "continue")

    def jump(self, stmt: ast.stmt, word: str) -> None:
        if self.quiet:
            return
        loop_at = max((i for i, f in enumerate(self.frames) if f.loop), default=-1)
        scope = loop_at if word in ("break", "continue") else 0
        if word in ("break", "continue") and loop_at < 0:
            return
        control = next((c for c in reversed(self.control) if c.depth > scope), None)
        if control is None:
            return
        skipped = []
        if word == "break":
            skipped = self.sites(self.frames[loop_at].stmts)
        else:
            for frame in self.frames[scope:]:
                skipped += self.sites(frame.stmts[frame.index + 1:])
            if word != "continue":
                for frame in self.frames:
                    if frame.loop:
                        skipped += self.sites(frame.stmts)
        frame = self.frames[-1]
        before = self.sites(frame.stmts[:frame.index])
        self.emit(divergent_skip.check(word, stmt.lineno, control.taint, control.line, before,
                                       skipped))

    # -- nested functions -----------------------------------------------------------------------
    def visit_FunctionDef(self, stmt: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if self.nested_defs:
            inner = FunctionWalker(self.program, self.module, None, self.env.copy(), self.report,
                                   self.facts, self.dataset_classes, self.quiet)
            inner.walk_function(None, stmt)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, stmt: ast.ClassDef) -> None:
        return None

    # -- complementary conditions ---------------------------------------------------------------
    def complement_pairs(self, stmts: list[ast.stmt]) -> set[int]:
        """Ifs on complementary conditions whose collectives even out (``if rank != 0:
        barrier()`` ... ``if rank == 0: barrier()``): their branches are not reported."""
        ifs = [(s, cond_key(s.test)) for s in stmts if isinstance(s, ast.If)]
        ifs = [(s, k) for s, k in ifs if k is not None]
        paired: set[int] = set()
        if len(ifs) < 2:
            return paired
        for i, (a, (ka, pa)) in enumerate(ifs):
            for b, (kb, pb) in ifs[i + 1:]:
                if ka != kb or pa == pb:
                    continue
                yes = self.sigs(a.body) + self.sigs(b.orelse)
                no = self.sigs(a.orelse) + self.sigs(b.body)
                if sorted(yes) == sorted(no):
                    paired.update((id(a), id(b)))
        return paired

    def sigs(self, stmts: list[ast.stmt]) -> list[str]:
        return [s.sig for s in self.sites(stmts) if not s.p2p]


def ends_in_jump(stmts: list[ast.stmt]) -> bool:
    """True when a block ends in continue, break, return or raise."""
    return bool(stmts) and isinstance(stmts[-1], (ast.Continue, ast.Break, ast.Return, ast.Raise))


NEGATE = {ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.GtE, ast.GtE: ast.Lt,
          ast.Gt: ast.LtE, ast.LtE: ast.Gt, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
          ast.In: ast.NotIn, ast.NotIn: ast.In}


def cond_key(test: ast.expr) -> tuple[str, bool] | None:
    """A condition as (what it tests, polarity): ``rank != 0`` is ``rank == 0`` negated;
    ``rank > 0`` is the same test as ``rank != 0`` for a rank."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = cond_key(test.operand)
        return (inner[0], not inner[1]) if inner else None
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op = type(test.ops[0])
        left, right = ast.dump(test.left), ast.dump(test.comparators[0])
        zero = isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value == 0
        if zero and op is ast.Gt:
            op = ast.NotEq
        if op in (ast.NotEq, ast.GtE, ast.Gt, ast.IsNot, ast.NotIn):
            return f"{left}{NEGATE[op].__name__}{right}", False
        return f"{left}{op.__name__}{right}", True
    if isinstance(test, (ast.Name, ast.Attribute, ast.Call)):
        return ast.dump(test), True
    return None
