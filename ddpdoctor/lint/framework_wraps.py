"""Which linted classes a job puts under DDP: DDP(...), ignite's auto_model, a Lightning Trainer's
fit or a Fabric's setup with a DDP strategy, accelerate's prepare."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from enum import Enum

from ddpdoctor.frameworks import accelerate, ignite, lightning, transformers
from ddpdoctor.lint.module import ParsedModule

# calls that return the module itself: DDP(Encoder().to(device)) wraps an Encoder
SAME_MODULE = frozenset({"to", "cuda", "cpu", "float", "double", "half", "bfloat16", "train",
                         "to_empty", "requires_grad_"})
# classmethods that build an instance of their class: Net.load_from_checkpoint(path) is a Net
BUILDERS = frozenset({lightning.BUILDER, transformers.BUILDER})
LIGHTNING = frozenset(lightning.PACKAGES)
ACCELERATE = frozenset(accelerate.PACKAGES)
# the words without which a file cannot name a wrap (a quick skip)
WRAP_WORDS = ("DistributedDataParallel", ignite.AUTO_MODEL.rsplit(".", 1)[-1],
              lightning.TRAINER, lightning.FABRIC, accelerate.ACCELERATOR)
NOT_DDP_PLUGINS = accelerate.NOT_DDP_PLUGINS


class Wrapper(str, Enum):
    """What put a module under DDP; its value is how that wrapper is given static_graph."""

    DDP = "DDP(..., static_graph=True)"
    LIGHTNING = lightning.TRAINER_STATIC_GRAPH
    FABRIC = lightning.FABRIC_STATIC_GRAPH
    ACCELERATE = accelerate.STATIC_GRAPH


@dataclass(frozen=True)
class WrapRoots:
    """The linted classes a file's DDP wraps name (with the wrapper of each), and whether a wrap's
    module was not resolved."""

    classes: frozenset[tuple[str, Wrapper]]
    unresolved: bool


def _framework(name: str | None, roots: frozenset[str], cls: str) -> bool:
    """True when a qualified name is class ``cls`` of one of the packages ``roots``."""
    return bool(name) and name.split(".", 1)[0] in roots and name.rsplit(".", 1)[-1] == cls


def _key(node: ast.expr) -> str | None:
    """A plain name (``model``) or an attribute of self (``self.model``) as text; None else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
            node.value.id == "self":
        return f"self.{node.attr}"
    return None


@dataclass(frozen=True)
class FileIndex:
    """One walk of a file: the values each plain name or self attribute is assigned anywhere
    (scopes are not told apart), and the calls by the name they call (``f(...)``, ``x.f(...)``)."""

    assigned: dict[str, list[ast.expr]]
    calls: dict[str, list[ast.Call]]


def _index(module: ParsedModule) -> FileIndex:
    """The file's index, built once per parsed file."""
    cached = module.__dict__.get("_wrap_index")
    if cached is not None:
        return cached
    index = FileIndex({}, {})
    for n in ast.walk(module.tree):
        if isinstance(n, ast.Assign):
            for key in {_key(t) for t in n.targets} - {None}:
                index.assigned.setdefault(key, []).append(n.value)
        elif isinstance(n, ast.AnnAssign) and n.value is not None and _key(n.target):
            index.assigned.setdefault(_key(n.target), []).append(n.value)
        elif isinstance(n, ast.Call):
            called = n.func.id if isinstance(n.func, ast.Name) else \
                n.func.attr if isinstance(n.func, ast.Attribute) else None
            if called is not None:
                index.calls.setdefault(called, []).append(n)
    module.__dict__["_wrap_index"] = index
    return index


def _assigned(key: str, module: ParsedModule) -> list[ast.expr]:
    """The values a plain name or self attribute is assigned anywhere in the file."""
    return _index(module).assigned.get(key, [])


def _values(node: ast.expr, module: ParsedModule, seen: frozenset[str] = frozenset()) \
        -> list[ast.expr]:
    """What an expression may stand for: itself, or through plain names and self attributes
    what they are assigned."""
    key = _key(node)
    if key is None:
        return [node]
    if key in seen:
        return []
    return [v for value in _assigned(key, module)
            for v in _values(value, module, seen | {key})]


def _arguments(name: str, module: ParsedModule) -> list[ast.expr]:
    """The arguments the file's calls pass to a function parameter called ``name``:
    ``fit(Auto())`` gives ``Auto()`` for ``def fit(module)``, ``Runner(Net())`` gives ``Net()`` for
    ``Runner.__init__(self, model)``."""
    constructors = {id(f): cls.name for cls in module.classes().values() for f in cls.body
                    if isinstance(f, ast.FunctionDef) and f.name == "__init__"}
    out: list[ast.expr] = []
    for fn in ast.walk(module.tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        called = constructors.get(id(fn), fn.name)
        params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
        if name not in params and name not in [a.arg for a in fn.args.kwonlyargs]:
            continue
        bound = 1 if params and params[0] in ("self", "cls") else 0
        index = params.index(name) - bound if name in params else None
        for call in _index(module).calls.get(called, []):
            out += [k.value for k in call.keywords if k.arg == name]
            if index is not None and 0 <= index < len(call.args) and \
                    not any(isinstance(a, ast.Starred) for a in call.args[:index + 1]):
                out.append(call.args[index])
    return out


def class_of(node: ast.expr, module: ParsedModule, classes: set[str],
             seen: frozenset[str] = frozenset()) -> str | None:
    """The linted class an expression builds: ``Encoder(...)``, ``Net.load_from_checkpoint(p)``,
    a name or self attribute assigned one, or a parameter the file's calls pass one."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
            node.func.attr in SAME_MODULE:
        node = node.func.value
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in BUILDERS:
            func = func.value
        name = (module.qualified(func) or "").rsplit(".", 1)[-1]
        return name if name in classes else None
    key = _key(node)
    if key is not None and key not in seen:
        params = _arguments(key, module) if isinstance(node, ast.Name) else []
        for value in _assigned(key, module) + params:
            found = class_of(value, module, classes, seen | {key})
            if found is not None:
                return found
    return None


def static_graph(call: ast.Call) -> bool:
    """True when a call passes ``static_graph`` with anything but a false constant."""
    return any(k.arg == "static_graph" and not (isinstance(k.value, ast.Constant)
                                                and not k.value.value) for k in call.keywords)


def _ddp_call(call: ast.Call, module: ParsedModule) -> bool:
    """DDP itself (FSDP marks no variable ready: the rule is DDP's), or ignite's auto_model."""
    name = module.qualified(call.func) or ""
    return name.rsplit(".", 1)[-1] == "DistributedDataParallel" or name == ignite.AUTO_MODEL


def _count(node: ast.expr, module: ParsedModule) -> int:
    """How many devices (or nodes) a Trainer argument visibly asks for; 0 when not visible
    ("auto", -1, a value the source does not show)."""
    for value in _values(node, module):
        if isinstance(value, ast.Constant) and isinstance(value.value, int) and \
                not isinstance(value.value, bool):
            return value.value
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            text = value.value.strip()
            if text.isdigit():
                return int(text)
            return len([p for p in text.split(",") if p.strip()]) if "," in text else 0
        if isinstance(value, (ast.List, ast.Tuple)):
            return len(value.elts)
    return 0


def lightning_ddp(trainer: ast.Call, module: ParsedModule) -> bool:
    """Rule: a Lightning Trainer (or Fabric: the same arguments) trains under DDP when its
    strategy is a "ddp..." name or a DDPStrategy without static_graph, or when it is "auto" (the
    default) and it visibly asks for more than one device or node (Lightning then picks "ddp", or
    "ddp_fork" in a notebook; one device is a SingleDeviceStrategy; a TPU is XLA's)."""
    given = {k.arg: k.value for k in trainer.keywords if k.arg is not None}
    if "strategy" in given:
        strategies = _values(given["strategy"], module)
        if not strategies:
            return False  # a strategy the source does not show
        strategy = strategies[0]
        if isinstance(strategy, ast.Call):
            return _framework(module.qualified(strategy.func), LIGHTNING,
                              lightning.DDP_STRATEGY) and \
                not static_graph(strategy)
        if not isinstance(strategy, ast.Constant) or not isinstance(strategy.value, str):
            return False
        if strategy.value.lower() != "auto":
            return strategy.value.lower().startswith("ddp")
    elif len(given) < len(trainer.keywords):
        return False  # Trainer(**config): the strategy is not in the source
    accelerator = given.get("accelerator")
    if isinstance(accelerator, ast.Constant) and accelerator.value in ("tpu", "xla"):
        return False
    return any(_count(given[k], module) > 1 for k in ("devices", "num_nodes") if k in given)


def accelerate_ddp(accelerator: ast.Call, module: ParsedModule) -> bool:
    """Rule: an Accelerator wraps prepared models in DDP (when more than one process runs, which
    lint cannot see: a visible prepare counts like a visible DDP call), unless it is given an
    FSDP, DeepSpeed or Megatron plugin, or kwargs_handlers hold a
    DistributedDataParallelKwargs(static_graph=True)."""
    for k in accelerator.keywords:
        if k.arg in NOT_DDP_PLUGINS and not (isinstance(k.value, ast.Constant)
                                             and k.value.value is None):
            return False
        if k.arg == "kwargs_handlers":
            for handlers in _values(k.value, module):
                items = handlers.elts if isinstance(handlers, (ast.List, ast.Tuple)) else []
                for handler in (h for item in items for h in _values(item, module)):
                    if isinstance(handler, ast.Call) and static_graph(handler) and _framework(
                            module.qualified(handler.func), ACCELERATE, accelerate.DDP_KWARGS):
                        return False
    return True


def _built_by(node: ast.expr, module: ParsedModule, package: frozenset[str],
              cls: str) -> list[ast.Call]:
    """The ``cls(...)`` calls of ``package`` an expression (a call, or a name assigned one)
    stands for."""
    return [v for v in _values(node, module) if isinstance(v, ast.Call)
            and _framework(module.qualified(v.func), package, cls)]


def _wrapped_arguments(call: ast.Call, module: ParsedModule) -> tuple[list[ast.expr], Wrapper]:
    """The modules one call puts under DDP (none when the call is no DDP wrap), and the wrapper."""
    if _ddp_call(call, module):
        return ([] if static_graph(call) else
                call.args[:1] + [k.value for k in call.keywords if k.arg == "module"]), Wrapper.DDP
    if not isinstance(call.func, ast.Attribute):
        return [], Wrapper.DDP
    method, receiver = call.func.attr, call.func.value
    if method in lightning.TRAINER_METHODS:
        trainers = _built_by(receiver, module, LIGHTNING, lightning.TRAINER)
        if not any(lightning_ddp(t, module) for t in trainers):
            return [], Wrapper.LIGHTNING
        return call.args[:1] + [k.value for k in call.keywords if k.arg == "model"], \
            Wrapper.LIGHTNING
    if method in lightning.FABRIC_METHODS:
        fabrics = _built_by(receiver, module, LIGHTNING, lightning.FABRIC)
        if not any(lightning_ddp(f, module) for f in fabrics):
            return [], Wrapper.FABRIC
        return call.args[:1] + [k.value for k in call.keywords if k.arg == "module"], \
            Wrapper.FABRIC
    if method in accelerate.PREPARE_METHODS:
        accelerators = _built_by(receiver, module, ACCELERATE, accelerate.ACCELERATOR)
        if not any(accelerate_ddp(a, module) for a in accelerators):
            return [], Wrapper.ACCELERATE
        if method == accelerate.PREPARE_MODEL and any(
                k.arg == accelerate.EVALUATION_KEYWORD and not (isinstance(k.value, ast.Constant)
                                                    and not k.value.value)
                for k in call.keywords):
            return [], Wrapper.ACCELERATE  # an evaluation model is not wrapped
        return [a for a in call.args if not isinstance(a, ast.Starred)] + \
            [k.value for k in call.keywords if k.arg == "model"], Wrapper.ACCELERATE
    return [], Wrapper.DDP


def wrap_roots(module: ParsedModule, classes: set[str]) -> WrapRoots:
    """The linted classes this file's DDP wraps (without static_graph) name; ``unresolved`` when a
    wrap names none of them (DDP(net) of a module the linted files do not build)."""
    if not any(word in line for line in module.lines for word in WRAP_WORDS):
        return WrapRoots(frozenset(), False)
    roots: set[tuple[str, Wrapper]] = set()
    unresolved = False
    by_key: dict[str, str | None] = {}  # a name wrapped at many sites is resolved once

    def resolved(arg: ast.expr) -> str | None:
        key = _key(arg)
        if key is None:
            return class_of(arg, module, classes)
        if key not in by_key:
            by_key[key] = class_of(arg, module, classes)
        return by_key[key]

    for node in ast.walk(module.tree):
        if not isinstance(node, ast.Call):
            continue
        wrapped, wrapper = _wrapped_arguments(node, module)
        if not wrapped:
            continue
        names = {resolved(arg) for arg in wrapped} - {None}
        roots |= {(name, wrapper) for name in names}
        unresolved = unresolved or not names
    return WrapRoots(frozenset(roots), unresolved)
