"""Object and parameter facts at work in the linted program: a call carries its arguments'
taint into the parameters (or a dataclass's fields) it reaches, and a function or method
starts with what those facts say (lint/attributes.py keeps them)."""

from __future__ import annotations

import ast
from typing import Callable

from ddpdoctor.lint.attributes import carried, class_fields, constructed
from ddpdoctor.lint.module import ParsedModule
from ddpdoctor.lint.program import FunctionInfo, FunctionNode, Program
from ddpdoctor.lint.taint import Env, Taint, stronger


def bind_call(program: Program, module: ParsedModule, cls: str | None, call: ast.Call,
              taint_of: Callable[[ast.expr], Taint | None]) -> None:
    """Carry the taint of a call's arguments to the parameters of the linted function it
    reaches (a constructor reaches ``__init__``; a class without one, a dataclass, takes the
    arguments as its fields)."""
    if not call.args and not call.keywords:
        return
    facts = program.objects
    built = constructed(call, module)
    info: FunctionInfo | None
    if built is not None:
        info = program.functions.get((module.path, f"{built.name}.__init__"))
        if info is None:
            fields = class_fields(built)
            pairs = list(zip(fields, call.args)) + [(k.arg, k.value) for k in call.keywords
                                                     if k.arg in fields]
            for name, value in pairs:
                facts.add_attr(module.path, built.name, name, _arg_taint(value, taint_of))
            return
    else:
        info = program.resolve(call, module, cls)
    if info is None:
        return
    args = info.node.args
    positional = [a.arg for a in [*args.posonlyargs, *args.args]]
    if info.cls is not None and positional and positional[0] in ("self", "cls"):
        positional = positional[1:]
    named = set(positional) | {a.arg for a in args.kwonlyargs}
    pairs = list(zip(positional, call.args)) + [(k.arg, k.value) for k in call.keywords
                                                 if k.arg in named]
    for name, value in pairs:
        if isinstance(value, ast.Starred):
            continue
        t = _arg_taint(value, taint_of)
        facts.add_param(info.node, name, t,
                        f"`{name}={ast.unparse(value)}` at the call on line {call.lineno}")


def _arg_taint(value: ast.expr, taint_of: Callable[[ast.expr], Taint | None]) -> Taint | None:
    return carried(taint_of(value))


def seed_objects(program: Program, env: Env, path: str, info: FunctionInfo | None,
                 node: FunctionNode) -> None:
    """A function starts with what calls pass into its parameters, and a method with what its
    class's objects may hold in their attributes (``self.enabled``), tainted."""
    objects = program.objects
    for name, t in objects.param_taints(node).items():
        env.taints[name] = stronger(env.taints.get(name), t)  # type: ignore[assignment]
        env.uniform.discard(name)
    if info is not None and info.cls is not None:
        for attr, t in objects.class_attrs(path, info.cls).items():
            env.taints[f"self.{attr}"] = t
