"""What a recorded decision read, bounded and side-effect free: the names a branch's line
loads (from its bytecode) and the text of their values (runtime/control_flow.py)."""

from __future__ import annotations

import dis
import sys
import types
from typing import Any

MAX_NAMES = 6  # names read for a site's values
_LOADS = {"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_DEREF", "LOAD_NAME", "LOAD_GLOBAL",
          "LOAD_FAST_LOAD_FAST", "LOAD_FAST_BORROW", "LOAD_FAST_BORROW_LOAD_FAST_BORROW"}


def short_value(value: Any) -> str:
    """A bounded, side-effect-free text of a value for a decision's evidence: numbers,
    strings, paths and None as repr, a CPU scalar tensor by its value, anything else by its
    type and size (the user's own ``__repr__`` is never called)."""
    t = type(value)
    if value is None or t in (bool, int, float, complex):
        return repr(value)[:40]
    if t in (str, bytes):
        return _ends(repr(value))
    module = getattr(t, "__module__", "") or ""
    if module.startswith("pathlib"):
        return _ends(repr(str(value)))
    if module.startswith("numpy") and t.__name__ not in ("ndarray", "matrix"):
        return repr(value)[:40]
    if module.startswith("torch") and t.__name__ in ("Tensor", "Parameter"):
        try:
            if value.numel() == 1 and value.device.type == "cpu":
                return f"tensor({value.item()!r})"[:48]
            return f"tensor{list(value.shape)} {str(value.dtype).replace('torch.', '')}"
        except Exception:  # noqa: BLE001 - a meta or fake tensor: its type says enough
            return "<tensor>"
    if t in (list, tuple, dict, set, frozenset):
        return f"{t.__name__} of {len(value)}"
    return f"<{t.__name__}>"


def _ends(text: str, room: int = 60) -> str:
    """``text`` within ``room`` characters, its start and its end kept (a path's file)."""
    half = (room - 3) // 2
    return text if len(text) <= room else f"{text[:half]}...{text[-half:]}"


def line_of(ins: dis.Instruction | None) -> int | None:
    return ins.positions.lineno if ins is not None and ins.positions else None


def names_before(table: dict[int, dis.Instruction], offsets: list[int], off: int,
                  line: int | None) -> tuple[str, ...]:
    """The names (and ``name.attr``) loaded on the branch's line before it: what its
    condition (or a loop's iterable) reads."""
    names: list[str] = []
    i = offsets.index(off) - 1
    chain: list[str] = []
    while i >= 0 and line is not None:
        ins = table[offsets[i]]
        if ins.positions is not None and ins.positions.lineno not in (line, None):
            break
        if ins.opname in ("LOAD_ATTR",) and isinstance(ins.argval, str):
            chain.insert(0, ins.argval)
        elif ins.opname in _LOADS:
            loaded = ins.argval if isinstance(ins.argval, tuple) else (ins.argval,)
            for n in reversed(loaded):
                if isinstance(n, str):
                    full = ".".join([n, *chain]) if chain and n == loaded[-1] else n
                    for name in dict.fromkeys((full, n)):  # `x.shape`, and `x` itself
                        if name not in names:
                            names.insert(0, name)
            chain = []
        else:
            chain = []
        i -= 1
    return tuple(names[-MAX_NAMES:])


def lookup(frame: types.FrameType, name: str) -> tuple[bool, Any]:
    """The value of ``name`` (``a`` or ``a.b``) in ``frame``, reading plain instance
    attributes only (no property, no ``__getattr__`` of the user's)."""
    base, *attrs = name.split(".")
    try:
        f_locals = frame.f_locals
        if base in f_locals:
            value = f_locals[base]
        elif base in frame.f_globals:
            value = frame.f_globals[base]
        else:
            return False, None
        for attr in attrs:
            d = getattr(value, "__dict__", None)
            if not isinstance(d, dict) or attr not in d or \
                    hasattr(type(value), attr) and hasattr(getattr(type(value), attr), "__get__"):
                return False, None
            value = d[attr]
        return True, value
    except Exception:  # noqa: BLE001 - a frame being torn down: no value
        return False, None


def codes_in(namespace: dict[str, Any], path: str, depth: int = 0) -> list[types.CodeType]:
    """The code objects of the functions and methods defined in ``path`` reachable from a
    module's (or a class's) namespace."""
    out: list[types.CodeType] = []
    for value in list(namespace.values()):
        for fn in (value, getattr(value, "__func__", None), getattr(value, "fget", None),
                   getattr(value, "__wrapped__", None)) if not isinstance(value, type) else ():
            code = getattr(fn, "__code__", None)
            if isinstance(code, types.CodeType) and code.co_filename == path:
                out.append(code)
        if isinstance(value, type) and depth < 3 and \
                getattr(sys.modules.get(value.__module__), "__file__", None) == path:
            out += codes_in(dict(vars(value)), path, depth + 1)
    return out
