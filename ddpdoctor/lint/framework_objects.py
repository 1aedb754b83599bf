"""Framework objects by what built them: the kinds label (``fabric``, ``trainer``,
``strategy``, ``accelerator``, ``engine``, ``hf_trainer``, ``lightning_module``) a value gets
from its construction (``Fabric(...)``, the first item of ``deepspeed.initialize(...)``), a
parameter's annotation, a class of the file that inherits a framework's (``self`` in a
LightningModule), a framework hook's parameters (a Lightning Callback's ``on_*(self, trainer,
pl_module)``) and the frameworks' own attributes (``self.trainer``, ``trainer.strategy``);
never from a variable's name."""

from __future__ import annotations

import ast

from ddpdoctor.frameworks import known
from ddpdoctor.lint.module import ParsedModule
from ddpdoctor.lint.taint import key_of

OBJECT_KINDS = known.object_kinds()
ATTRS = known.object_attrs()
TUPLE_BUILDERS = known.tuple_builders()
HOOKS = known.hooks()
NAME_WORDS = known.name_words()
Kinds = dict[str, frozenset[str]]


def class_kind(module: ParsedModule, name: str) -> str | None:
    """The kind of a class: a framework's, or a class of the file that inherits one, directly
    or through the file's other classes (``class Net(L.LightningModule)`` -> lightning_module)."""
    found = known.object_kind(name)
    if found is not None:
        return found
    cache = module.__dict__.setdefault("_class_object_kinds", {})
    if name in cache:
        return cache[name]
    cache[name] = None  # a cycle of bases ends here
    node = module.classes().get(name)
    if node is not None:
        for base in node.bases:
            qualified = module.qualified(base)
            if qualified is not None and qualified != name:
                found = class_kind(module, qualified)
                if found is not None:
                    break
    cache[name] = found
    return found


def declare_class_kind(module: ParsedModule, name: str, kind: str | None) -> None:
    """A framework's own class, read from its source: ``self`` in its methods is of its kind."""
    module.__dict__.setdefault("_class_object_kinds", {})[name] = kind


def built_kind(call: ast.Call, module: ParsedModule) -> frozenset[str]:
    """What framework object a call builds: ``L.Fabric(...)`` -> {fabric}."""
    name = module.qualified(call.func)
    kind = class_kind(module, name) if name else None
    return frozenset({kind}) if kind is not None else frozenset()


def unpacked_kinds(targets: list[ast.expr], call: ast.Call, module: ParsedModule) -> Kinds:
    """``engine, opt, _, _ = deepspeed.initialize(...)``: the engine is one."""
    kind = TUPLE_BUILDERS.get(module.qualified(call.func) or "")
    key = key_of(targets[0]) if kind is not None and targets else None
    return {key: frozenset({kind})} if key is not None and kind is not None else {}


def annotated_kind(annotation: ast.expr | None, module: ParsedModule) -> str | None:
    """The kind a parameter's annotation names: ``fabric: L.Fabric``, ``Optional[Trainer]``,
    ``"Accelerator"``."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return None
    if isinstance(annotation, ast.Subscript):  # Optional[X]
        annotation = annotation.slice
    if isinstance(annotation, ast.BinOp):  # X | None
        annotation = annotation.left
    name = module.qualified(annotation) if isinstance(annotation, ast.expr) else None
    return class_kind(module, name) if name else None


def param_kinds(node: ast.FunctionDef | ast.AsyncFunctionDef, module: ParsedModule,
                cls: str | None) -> Kinds:
    """What framework objects a function's parameters hold: by their annotation, or by the
    framework's hook signature when the method overrides a hook of a framework's class."""
    args = node.args
    out: Kinds = {}
    for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
        if a.annotation is not None:
            kind = annotated_kind(a.annotation, module)
            if kind is not None:
                out[a.arg] = frozenset({kind})
    owner = class_kind(module, cls) if cls is not None else None
    positional = [a.arg for a in [*args.posonlyargs, *args.args]]
    static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
    if owner is None or not positional or static:
        return out
    out[positional[0]] = frozenset({owner})  # self
    hook = HOOKS.get(owner)
    if hook is not None and node.name.startswith(hook[0]):
        for name, kind in zip(positional[1:], hook[1]):
            out.setdefault(name, frozenset({kind}))
    return out


def self_kinds(module: ParsedModule, cls: str | None) -> Kinds:
    """``self`` in a class that inherits a framework's: {self: lightning_module}."""
    kind = class_kind(module, cls) if cls is not None else None
    return {"self": frozenset({kind})} if kind is not None else {}


def object_kinds(node: ast.expr, kinds: Kinds) -> frozenset[str]:
    """The framework objects an expression may hold: by what its name was built as, or as a
    framework object's attribute (``self.trainer.strategy`` in a LightningModule -> strategy)."""
    key = key_of(node)
    if key is not None:
        found = kinds.get(key, frozenset()) & OBJECT_KINDS
        if found:
            return found
    if isinstance(node, ast.Attribute):
        owners = object_kinds(node.value, kinds)
        return frozenset(ATTRS[(o, node.attr)] for o in owners if (o, node.attr) in ATTRS)
    return frozenset()


def named_kinds(name: str) -> frozenset[str]:
    """The fallback when lint did not see an object built: the kinds a receiver's name says it
    may be (``trainer`` built by a config's ``instantiate``); its findings are warnings at
    most."""
    name = name.lower()
    return frozenset(k for word, kinds in NAME_WORDS.items() if word in name for k in kinds)
