"""StateChecks: the walker's checks on state that every rank must keep alike, run at each
assignment and call: a trainer's stop flag, a monitored metric, a collective's tensor shape,
the replicas' parameters and optimizer settings after DDP's construction; and the objects
that take in rank-local data (``early_stopping(val_loss)``) and so hold rank-local state."""

from __future__ import annotations

import ast

from ddpdoctor.frameworks import lightning
from ddpdoctor.lint.collectives import dist_op
from ddpdoctor.lint.rules import collective_shape, framework_state, replica_drift
from ddpdoctor.lint.taint import Taint, key_of, stronger
from ddpdoctor.lint.uniformity import device_move

SIZED = "sized"  # a kinds label: a tensor whose shape (in env.shapes) is known
SIZE_FACTORIES = frozenset({"ones", "zeros", "empty", "rand", "randn", "full"})
LIKE_FACTORIES = frozenset({"ones_like", "zeros_like", "empty_like", "rand_like",
                            "randn_like", "full_like"})
FROM_DATA = frozenset({"tensor", "as_tensor", "Tensor", "FloatTensor", "LongTensor",
                       "IntTensor", "from_numpy", "stack", "cat", "array", "asarray"})
STATEFUL_METHODS = frozenset({"step", "record", "observe", "__call__"})
MODEL_ROOTS = frozenset({"model", "ddp_model", "net", "module", "wrapped_model", "self.model",
                         "self.net"})


class StateChecks:
    """Mixed into DataFlow: the checks need its state (env, control, module, program)."""

    # -- tensor shapes --------------------------------------------------------------------------
    def tensor_shape(self, value: ast.expr) -> tuple[bool, Taint | None]:
        """(is a tensor of known construction, what its shape depends on)."""
        while isinstance(value, ast.Call) and device_move(value) is not None:
            value = device_move(value)  # type: ignore[assignment]
        key = key_of(value)
        if key is not None and SIZED in self.env.kinds.get(key, frozenset()):
            return True, self.env.shapes.get(key)
        if not isinstance(value, ast.Call):
            return False, None
        name = (self.module.qualified(value.func) or "").rsplit(".", 1)[-1]
        if name in SIZE_FACTORIES:
            sizes = value.args[:1] if name == "full" else value.args
            return True, self.taint_of(ast.Tuple(list(sizes)))
        if name in LIKE_FACTORIES and value.args:
            return self.tensor_shape(value.args[0])
        if name in FROM_DATA and value.args:
            return True, self.length_of(value.args[0])
        return False, None

    def length_of(self, node: ast.expr) -> Taint | None:
        """What the length of a list or tensor ``node`` depends on."""
        if isinstance(node, (ast.List, ast.Tuple)):
            if any(isinstance(e, ast.Starred) for e in node.elts):
                return self.taint_of(node)
            return None  # a literal: as many items on every rank
        if isinstance(node, (ast.ListComp, ast.GeneratorExp)):
            result: Taint | None = None
            for gen in node.generators:
                result = stronger(result, self.trip_taint(gen.iter))
                for cond in gen.ifs:
                    result = stronger(result, self.taint_of(cond))
            return result
        sized, shape = self.tensor_shape(node)
        if sized:
            return shape
        key = key_of(node)
        if key is not None and key in self.env.shapes:
            return self.env.shape(key)
        return None

    def track_tensor(self, key: str, value: ast.expr) -> None:
        sized, shape = self.tensor_shape(value)
        if sized:
            self.env.kinds[key] = self.env.kinds.get(key, frozenset()) | {SIZED}
            self.env.shapes[key] = stronger(shape, self.control_taint())

    def check_shape(self, call: ast.Call) -> None:
        op = dist_op(call, self.module)
        index = collective_shape.SHAPED.get(op or "")
        if index is None or len(call.args) <= index:
            return
        arg = call.args[index]
        sized, shape = self.tensor_shape(arg)
        if sized and shape is not None and shape.divergent():
            name = ast.unparse(arg)
            self.emit(collective_shape.check(op or "", name, call.lineno, shape))

    # -- framework state ------------------------------------------------------------------------
    def rank_control(self) -> int | None:
        """The line of the innermost rank-dependent condition the statement runs under."""
        found = next((c for c in reversed(self.control) if c.taint.is_rank()), None)
        return found.line if found is not None else None

    def check_assign_target(self, target: ast.expr, line: int) -> None:
        cond = self.rank_control()
        if cond is None:
            return
        if isinstance(target, ast.Attribute) and target.attr in framework_state.STOP_ATTRS:
            self.emit(framework_state.stop(ast.unparse(target), line, cond))
        elif isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant) and \
                target.slice.value in replica_drift.OPTIMIZER_KEYS and self.after_ddp():
            self.emit(replica_drift.check(f"{ast.unparse(target)} = ...", line, cond))

    def check_log(self, call: ast.Call) -> None:
        func = call.func
        if not (isinstance(func, ast.Attribute) and func.attr in ("log", "log_dict")):
            return
        monitors = self.program.monitors
        if not monitors:
            return
        keys: list[str] = []
        first = call.args[0] if call.args else None
        if func.attr == "log" and isinstance(first, ast.Constant) and \
                isinstance(first.value, str):
            keys = [first.value]
        elif func.attr == "log_dict" and isinstance(first, ast.Dict):
            keys = [k.value for k in first.keys if isinstance(k, ast.Constant) and
                    isinstance(k.value, str)]
        key = next((k for k in keys if k in monitors), None)
        if key is None:
            return
        zero_only = any(k.arg == lightning.RANK_ZERO_KEYWORD and isinstance(k.value, ast.Constant) and
                        k.value.value is True for k in call.keywords)
        cond = self.rank_control()
        if zero_only or cond is not None:
            self.emit(framework_state.log(ast.unparse(func), key, monitors[key], call.lineno,
                                          None if zero_only else cond))

    # -- replicas after DDP ---------------------------------------------------------------------
    def after_ddp(self) -> bool:
        """True once this walk has seen the model wrapped in DDP (here, or handed in as a DDP
        model): a method that merely shares its class with a DDP attribute may run before."""
        return self.ddp_seen and not self.env.before_ddp

    def model_rooted(self, node: ast.expr) -> bool:
        """True for an expression reached from the (DDP) model: ``model.module.fc``."""
        while True:
            key = key_of(node)
            if key is not None:
                labels = self.env.kinds.get(key, frozenset())
                if "ddp" in labels or "model" in labels or key in MODEL_ROOTS:
                    return True
            if isinstance(node, (ast.Attribute, ast.Subscript)):
                node = node.value
            elif isinstance(node, ast.Call):
                node = node.func
            else:
                return False

    def check_replica(self, call: ast.Call) -> None:
        cond = self.rank_control()
        if cond is None or not self.after_ddp():
            return
        func = call.func
        name = self.module.qualified(func) or ""
        if name.startswith("torch.nn.init.") and call.args and self.model_rooted(call.args[0]):
            self.emit(replica_drift.check(f"{name.rsplit('.', 1)[-1]}()", call.lineno, cond))
            return
        if not isinstance(func, ast.Attribute) or func.attr not in replica_drift.PARAM_METHODS:
            return
        receiver = func.value
        optimizer = func.attr == "load_state_dict" and \
            "optimizer" in self.env.kinds.get(key_of(receiver) or "", frozenset())
        if optimizer or self.model_rooted(receiver):
            self.emit(replica_drift.check(f"{ast.unparse(func)}()", call.lineno, cond))

    # -- objects fed rank-local data ------------------------------------------------------------
    def feed_state(self, call: ast.Call) -> None:
        """``early_stopping(val_loss)``, ``stopper.step(metric)``: an object of the file's own
        (not a module) that takes in rank-local data holds rank-local state afterwards."""
        func = call.func
        target = func
        if isinstance(func, ast.Attribute) and func.attr in STATEFUL_METHODS:
            target = func.value
        key = key_of(target)
        if key is None or key not in self.env.shapes:
            return
        labels = self.env.kinds.get(key, frozenset())
        if not any(lb.startswith("class:") for lb in labels) or "model" in labels:
            return
        cls = self.module.classes().get(next(lb for lb in labels
                                             if lb.startswith("class:")).split(":", 1)[1])
        if cls is None or any("Module" in ast.unparse(b) for b in cls.bases):
            return
        t = self.all_taint(call)
        if t is not None and t.divergent():
            self.mix(target, t)
