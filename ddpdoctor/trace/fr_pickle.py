"""Decode torch's pickle flight recorder dumps as plain data, without unpickling them.

torch writes its dumps (``_dump_fr_trace``, dump-on-timeout, ``torchfrtrace``'s input) as
a pickle of dicts, lists, tuples, strings, numbers, booleans and None.  This decoder walks
the opcodes (``pickletools.genops`` parses, it runs nothing) and builds only those values:
an opcode that would name a class or call a function (GLOBAL, REDUCE, BUILD, ...) makes it
NotPlainData, read no further.  No object of the file's choosing is ever made.  Also here:
``repaired``, the names torch 2.13's gloo dumps leave out, which its own tool needs.
"""

from __future__ import annotations

import pickletools
from typing import Any

_MARK = object()


class NotPlainData(ValueError):
    """Bytes that are no pickle of plain data (broken, or asking for a class or a call)."""


class _NotPlain(Exception):
    """An opcode that would build something other than plain data."""
_PUSH_ARG = {"INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT",
             "BINFLOAT", "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "UNICODE", "STRING",
             "BINSTRING", "SHORT_BINSTRING", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8"}
_CONSTANT = {"NONE": None, "NEWTRUE": True, "NEWFALSE": False}
_EMPTY = {"EMPTY_DICT": dict, "EMPTY_LIST": list, "EMPTY_TUPLE": tuple}
_IGNORED = {"PROTO", "FRAME"}
MAX_DEPTH = 64  # torch's dumps nest 4 deep
NODES_PER_BYTE = 4  # the values reached, counted again where shared: a shared or cyclic
# structure that would unfold far beyond its bytes (a "billion laughs") is refused
_MEMO_PUT = {"PUT", "BINPUT", "LONG_BINPUT"}
_MEMO_GET = {"GET", "BINGET", "LONG_BINGET"}


def _since_mark(stack: list[Any]) -> list[Any]:
    for i in range(len(stack) - 1, -1, -1):
        if stack[i] is _MARK:
            items = stack[i + 1:]
            del stack[i:]
            return items
    raise ValueError("no mark")


def _pairs(items: list[Any]) -> list[tuple[Any, Any]]:
    return list(zip(items[0::2], items[1::2]))


def _apply(name: str, arg: Any, stack: list[Any], memo: dict[Any, Any]) -> None:
    """One opcode's effect on the stack; _NotPlain for an opcode that is not plain data."""
    if name in _PUSH_ARG:
        stack.append(arg.decode("latin-1") if name.endswith("STRING") and
                     isinstance(arg, bytes) else arg)
    elif name in _CONSTANT:
        stack.append(_CONSTANT[name])
    elif name in _EMPTY:
        stack.append(_EMPTY[name]())
    elif name == "MARK":
        stack.append(_MARK)
    elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
        n = int(name[-1])
        items = stack[-n:]
        del stack[-n:]
        stack.append(tuple(items))
    elif name == "TUPLE":
        stack.append(tuple(_since_mark(stack)))
    elif name == "LIST":
        stack.append(_since_mark(stack))
    elif name == "DICT":
        stack.append(dict(_pairs(_since_mark(stack))))
    elif name == "APPEND":
        value = stack.pop()
        stack[-1].append(value)
    elif name == "APPENDS":
        items = _since_mark(stack)
        stack[-1].extend(items)
    elif name == "SETITEM":
        value, key = stack.pop(), stack.pop()
        stack[-1][key] = value
    elif name == "SETITEMS":
        items = _since_mark(stack)
        stack[-1].update(_pairs(items))
    elif name in _MEMO_PUT:
        memo[arg] = stack[-1]
    elif name == "MEMOIZE":
        memo[len(memo)] = stack[-1]
    elif name in _MEMO_GET:
        stack.append(memo[arg])
    elif name == "POP":
        stack.pop()
    elif name == "POP_MARK":
        _since_mark(stack)
    elif name not in _IGNORED:
        raise _NotPlain(name)


def _check_size(value: Any, most: int, what: str) -> None:
    """NotPlainData when ``value`` nests deeper than MAX_DEPTH or unfolds into more than
    ``most`` values (what printing or walking it would visit)."""
    todo = [(value, 0)]
    seen = 0
    while todo:
        item, depth = todo.pop()
        seen += 1
        if seen > most or depth > MAX_DEPTH:
            raise NotPlainData(f"{what} is a pickle nested too deeply or shared too widely "
                               "to be read")
        if isinstance(item, dict):
            todo.extend((v, depth + 1) for kv in item.items() for v in kv)
        elif isinstance(item, (list, tuple)):
            todo.extend((v, depth + 1) for v in item)


def decode(raw: bytes, what: str) -> Any:
    """The plain data pickled in ``raw``; NotPlainData (naming ``what``) when the pickle is
    broken or asks for anything but plain data (a class, a function, a persistent id)."""
    stack: list[Any] = []
    memo: dict[Any, Any] = {}
    name = ""
    try:
        for op, arg, _pos in pickletools.genops(raw):
            name = op.name
            if name == "STOP":
                if len(stack) != 1 or stack[0] is _MARK:
                    break
                _check_size(stack[0], NODES_PER_BYTE * len(raw) + 1024, what)
                return stack[0]
            _apply(name, arg, stack, memo)
    except NotPlainData:
        raise
    except _NotPlain:
        raise NotPlainData(f"{what} is a pickle that asks for more than plain data (opcode "
                       f"{name}): not read (ddpdoctor never unpickles)") from None
    except (ValueError, IndexError, TypeError, KeyError, AttributeError,
            UnicodeDecodeError) as e:
        raise NotPlainData(f"{what} is a broken pickle ({name}: {type(e).__name__})") from None
    raise NotPlainData(f"{what} is a broken pickle (it does not end where it should)")


def repaired(dump: dict[str, Any]) -> dict[str, Any]:
    """``dump`` with each group of ``pg_config`` keyed and named as its entries name it.
    torch 2.13's gloo dumps key the default group's config by "" (no name, no desc) while its
    entries say ("0", "default_pg"); torch's own ``torchfrtrace`` then fails on a KeyError.
    Only an unambiguous repair is made: one nameless config, one group named by the entries
    and not configured."""
    configs = dump.get("pg_config")
    entries = dump.get("entries")
    if not isinstance(configs, dict) or not isinstance(entries, list):
        return dump
    named = {}
    for e in entries:
        pg = e.get("process_group") if isinstance(e, dict) else None
        if isinstance(pg, (list, tuple)) and len(pg) == 2 and pg[0] not in configs:
            named[str(pg[0])] = str(pg[1])
    nameless = [k for k, v in configs.items() if isinstance(v, dict) and not v.get("name")]
    if len(nameless) != 1 or len(named) != 1:
        return dump
    name, desc = next(iter(named.items()))
    fixed = {k: v for k, v in configs.items() if k != nameless[0]}
    fixed[name] = dict(configs[nameless[0]], name=name, desc=desc)
    return dict(dump, pg_config=fixed)
