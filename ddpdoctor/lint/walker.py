"""FunctionWalker: one pass over a function in execution order, tracking which values differ
between ranks and which collectives each path issues, and asking the rules at each branch."""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace

from ddpdoctor.lint.object_flow import seed_objects
from ddpdoctor.lint.framework_objects import param_kinds
from ddpdoctor.lint.collectives import IN_PLACE_UNIFORM, dist_op, flat, receiver_name
from ddpdoctor.lint.flow import Control, DataFlow, Frame, ModuleFacts
from ddpdoctor.lint.rules import conditional_collective, divergent_skip, \
    lock_across_collective, rank_dependent_loop, recv_before_send
from ddpdoctor.lint.walk_shapes import cond_key, ends_in_jump, hands_back_argument, \
    absent_side, iterator_end, merge_items, single_side, told_rank
from ddpdoctor.lint.program import FunctionInfo, ddp_annotation
from ddpdoctor.lint.summaries import no_grad_decorated, rank_decorator, with_flags
from ddpdoctor.lint.uniformity import benign_handler, strip_wrappers
from ddpdoctor.lint.taint import Env, Taint, TaintKind, key_of, \
    stronger

__all__ = ["FunctionWalker", "ModuleFacts"]
JOIN_CALLS = ("Join", "join", "join_uneven_inputs")


@dataclass
class FunctionWalker(DataFlow):
    """Walks one function (or a module's top level) and reports drafts through ``report``."""

    # -- entry points ---------------------------------------------------------------------------
    def walk_function(self, info: FunctionInfo | None,
                      node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.seed_params(node)
        seed_objects(self.program, self.env, self.module.path, info, node)
        self.passthrough = hands_back_argument(node)
        self.mark_before_ddp(node.body)
        self.no_grad = no_grad_decorated(node, self.module)
        dec = rank_decorator(node)
        if dec is not None:
            t = Taint(TaintKind.RANK, dec.lineno)
            self.emit(conditional_collective.check(t, dec.lineno, self.sites(node.body), []))
            self.control.append(Control(t, dec.lineno, 0))
        self.block(node.body)
        if info is not None and self.summary:
            info.returns = stronger(info.returns, self.returns)
            info.returns_elts = merge_items(info.returns_elts, self.returns_elts)

    def seed_params(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
        spawned = node.name in self.program.spawn_targets
        info = self.program.by_node.get(id(node))
        given_ddp = self.program.params_given_ddp(info) if info is not None else frozenset()
        told = told_rank(node, self.module)
        framework = param_kinds(node, self.module, self.cls)
        for i, arg in enumerate(args):
            self.env.uniform.discard(arg.arg)
            self.env.kinds.pop(arg.arg, None)
            self.env.taints.pop(arg.arg, None)
            if (spawned and i == 0) or arg.arg in told:
                self.env.taints[arg.arg] = Taint(TaintKind.RANK, node.lineno)
            if self.summary and not (i == 0 and arg.arg in ("self", "cls")):
                mine = frozenset({arg.arg})
                t = self.env.taints.get(arg.arg)
                self.env.taints[arg.arg] = Taint(TaintKind.PARAM, node.lineno, params=mine) \
                    if t is None else replace(t, params=mine)
            if arg.arg in framework:
                self.env.kinds[arg.arg] = framework[arg.arg]
            if arg.arg in given_ddp or ddp_annotation(arg, self.module):
                self.env.kinds[arg.arg] = frozenset({"ddp"})
                self.ddp_seen = True

    # -- blocks -------------------------------------------------------------------------------
    def block(self, stmts: list[ast.stmt], loop: bool = False) -> None:
        paired = self.complement_pairs(stmts)
        if not any(c.taint.kind == TaintKind.RANK for c in self.control):
            self.emit(recv_before_send.check(stmts, self.module))
        frame = Frame(stmts, 0, loop)
        self.frames.append(frame)
        held: dict[str, int] = {}  # locks taken in this block and not let go yet: their line
        try:
            for i, stmt in enumerate(stmts):
                frame.index = i
                held = self.locks(stmt, held)
                if isinstance(stmt, ast.If):
                    self.visit_if(stmt, id(stmt) in paired)
                else:
                    self.visit(stmt)
        finally:
            self.frames.pop()

    def locks(self, stmt: ast.stmt, held: dict[str, int]) -> dict[str, int]:
        """The locks held after ``stmt``; a collective while one is held is reported."""
        taken = lock_across_collective.acquires(stmt, self.module)
        if taken is not None:
            return {**held, taken: stmt.lineno}
        let_go = lock_across_collective.releases(stmt, self.module)
        if let_go is not None:
            return {k: v for k, v in held.items() if k != let_go}
        if held:
            sites = [s for s in self.sites([stmt]) if not s.p2p]
            if sites:
                self.emit(lock_across_collective.check(min(held.values()), sites[0]))
        return held

    def visit(self, stmt: ast.stmt) -> None:
        handler = getattr(self, f"visit_{type(stmt).__name__}", None)
        if handler is not None:
            handler(stmt)
        else:
            self.calls_in(stmt)

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
            if self.ends_job(stmt.body) or self.ends_job(stmt.orelse):
                skip_rule = True  # that side ends the job: the launcher stops every rank
            elif ends_in_jump(stmt.body) and not ends_in_jump(stmt.orelse):
                orelse += self.sites(rest)  # the other path goes on past the if
                skip_rule = not body
            elif ends_in_jump(stmt.orelse) and not ends_in_jump(stmt.body):
                body += self.sites(rest)
                skip_rule = not orelse
            membership = isinstance(stmt.test, ast.Compare) and \
                isinstance(stmt.test.ops[0], (ast.In, ast.NotIn))
            if not skip_rule:
                self.emit(conditional_collective.check(t, stmt.lineno, body, orelse, membership))
        raw = self.taint_of(stmt.test)
        single = raw is not None and raw.kind == TaintKind.WORLD  # if world_size > 1: ...
        alone = single_side(stmt.test, self.taint_of) if single else \
            absent_side(stmt.test, self.taint_of) if raw is None else None
        self.branches(t, stmt.lineno, [stmt.body, stmt.orelse], single_process_side=single,
                      alone=alone)

    def branches(self, t: Taint | None, line: int, bodies: list[list[ast.stmt]],
                 loop: bool = False, single_process_side: bool = False,
                 alone: int | None = None) -> None:
        """Walk each body from the same state and join them. ``single_process_side``: the
        condition tests the world size, so one side runs where there is one rank only, and
        what the other side made uniform (a reduce) is uniform after the join. ``alone``: the
        index of the body that runs in a single process (no process group): what it returns
        or skips no other rank waits for."""
        if t is not None:
            self.control.append(Control(t, line, len(self.frames)))
        start = self.env
        merged: Env | None = None
        reduced: set[str] = set()
        for i, body in enumerate(bodies):
            self.env = start.copy()
            saved = self.single_process
            self.single_process = saved or i == alone
            self.block(body, loop)
            self.single_process = saved
            reduced |= self.env.uniform
            if i == alone and not single_process_side:
                continue  # what a process without a rank assigns, no rank of a job sees
            merged = self.env if merged is None else merged.merge(self.env)
        if merged is not None and single_process_side:
            merged.uniform |= reduced
            for key in reduced:
                merged.taints.pop(key, None)
        self.env = merged if merged is not None else start
        if t is not None:
            self.control.pop()

    def visit_For(self, stmt: ast.For | ast.AsyncFor) -> None:
        self.calls_in(stmt.iter)
        t = self.trip_taint(stmt.iter)
        t = t if t is not None and t.divergent() else None
        if t is not None and not self.quiet:
            self.facts.uneven_loops[id(stmt)] = t
        if stmt.iter.lineno in self.facts.world_splits and self.uses_rank(stmt.body):
            self.facts.world_splits.discard(stmt.iter.lineno)  # i + rank: split after all
        self.loop(stmt, t)
        self.reduced_in_loop(stmt)

    def uses_rank(self, stmts: list[ast.stmt]) -> bool:
        """True when the statements read the rank (``params[base + rank]``)."""
        for stmt in stmts:
            for node in ast.walk(stmt):
                if isinstance(node, (ast.Name, ast.Attribute)):
                    t = self.taint_of(node)
                    if t is not None and t.kind == TaintKind.RANK:
                        return True
        return False

    def reduced_in_loop(self, stmt: ast.For | ast.AsyncFor) -> None:
        """``for v in d.values(): dist.all_reduce(v)``: every value of ``d`` is the same on
        every rank afterwards."""
        it = stmt.iter
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and
                it.func.attr in ("values", "items") and not it.args):
            return
        key = key_of(it.func.value)
        target = stmt.target.elts[-1] if isinstance(stmt.target, ast.Tuple) and \
            it.func.attr == "items" else stmt.target
        var = key_of(target)
        if key is None or var is None:
            return
        for node in ast.walk(ast.Module(stmt.body, [])):
            if isinstance(node, ast.Call) and node.args and key_of(node.args[0]) == var and \
                    dist_op(node, self.module) in IN_PLACE_UNIFORM:
                self.env.taints.pop(key, None)
                self.env.uniform.add(key)
                return

    visit_AsyncFor = visit_For

    def loop_targets(self, stmt: ast.For | ast.AsyncFor, t: Taint | None) -> None:
        it = stmt.iter
        data = self.loader_like(strip_wrappers(it.body if isinstance(it, ast.IfExp) else it))
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
        return key is not None and "loader" in self.env.kinds.get(key, frozenset())

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

    def ends_job(self, stmts: list[ast.stmt]) -> bool:
        """A block that ends in a ``raise`` no ``try`` of this function catches: the error ends
        the rank, and the launcher (torchrun, mp.spawn) the job; no rank is left waiting."""
        return bool(stmts) and isinstance(stmts[-1], ast.Raise) and not self.catching

    def visit_Try(self, stmt: ast.Try) -> None:
        start = self.env.copy()
        self.catching += bool(stmt.handlers)
        try:
            self.block(stmt.body)
        finally:
            self.catching -= bool(stmt.handlers)
        after_body = self.env
        merged = after_body
        for handler in stmt.handlers:
            self.env = start.merge(after_body)
            if benign_handler(handler):  # every rank takes it alike: no divergence
                end = iterator_end(handler, stmt.body)
                if end is not None:  # but where it ends this rank's iterator, it jumps alone
                    self.control.append(Control(Taint(TaintKind.SHARD, end), handler.lineno,
                                                len(self.frames), jumps_only=True))
                self.block(handler.body)
                if end is not None:
                    self.control.pop()
                merged = merged.merge(self.env)
                continue
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
        if self.single_process:  # one process, no group: its value is every rank's
            if stmt.value is not None:
                self.calls_in(stmt.value)
            return
        if stmt.value is not None:
            self.calls_in(stmt.value)
            self.returns = stronger(self.returns, self.taint_of(stmt.value))
        if not self.passthrough:  # which value comes back depends on the path taken
            self.returns = stronger(self.returns, self.control_taint())
        if self.summary:
            self.tuple_return(stmt.value)
        self.jump(stmt, "return")

    def tuple_return(self, value: ast.expr | None) -> None:
        """Item by item, what a function that returns tuples of one length returns
        (``return use_ddp, rank, device``): unpacking its result gives each name its own."""
        if not isinstance(value, ast.Tuple) or any(isinstance(e, ast.Starred)
                                                   for e in value.elts):
            self.returns_elts = []
            return
        control = None if self.passthrough else self.control_taint()
        items = [stronger(self.taint_of(e), control) for e in value.elts]
        if self.returns_elts is None:
            self.returns_elts = items
        elif len(self.returns_elts) == len(items):
            self.returns_elts = [stronger(a, b) for a, b in zip(self.returns_elts, items)]
        else:
            self.returns_elts = []

    def visit_Raise(self, stmt: ast.Raise) -> None:
        self.jump(stmt, "raise")

    def visit_Break(self, stmt: ast.Break) -> None:
        self.jump(stmt, "break")

    def visit_Continue(self, stmt: ast.Continue) -> None:
        self.jump(stmt, "continue")

    def jump(self, stmt: ast.stmt, word: str) -> None:
        if self.quiet or self.single_process:
            return
        loop_at = max((i for i, f in enumerate(self.frames) if f.loop), default=-1)
        scope = loop_at if word in ("break", "continue") else 0
        if word in ("break", "continue") and loop_at < 0:
            return
        control = next((c for c in reversed(self.control) if c.depth > scope), None)
        if control is None:
            return
        if word == "raise" and (control.taint.kind == TaintKind.EXCEPTION or not self.catching):
            return  # an error no try here catches: the rank fails, the launcher ends the job
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
        return flat(self.sites(stmts))
