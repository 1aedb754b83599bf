"""Values that look rank-dependent but are the same on every rank.

The taint analysis (taint.py) marks a value by where it comes from: the rank, the data, the
clock... Some expressions built from such a value are nevertheless uniform, and every rule
that fires on a tainted value would cry wolf on them:

- a presence test: ``int(os.environ.get("RANK", -1)) != -1`` asks "is this a distributed
  run?", and every rank of a job answers alike (a rank is never -1 or None);
- a value moved to the rank's device: ``x.to(local_rank)``, a checkpoint loaded with
  ``map_location=device``: the device differs by rank, the values do not;
- a length-preserving wrapper: ``tqdm(loader, disable=not is_main)``, ``enumerate``,
  ``zip``, ``rich.progress.track``: as many items on every rank as what it wraps;
- an exception that every rank meets alike: ``except ImportError`` (the same environment),
  ``except StopIteration`` (a loader's end: loops judge a loader's length themselves).
"""

from __future__ import annotations

import ast

DEVICE_METHODS = frozenset({"to", "cuda", "to_device", "pin_memory", "contiguous", "detach",
                            "cpu", "float", "half", "bfloat16", "double", "long", "int",
                            "clone"})
DEVICE_KEYWORDS = frozenset({"device", "device_type", "map_location", "device_ids", "output_device",
                             "non_blocking", "dtype", "pin_memory_device", "memory_format"})
LENGTH_KEEPING = frozenset({"tqdm", "track", "enumerate", "iter", "list", "tuple", "sorted",
                            "reversed", "trange_wrap", "progress", "ProgressBar"})
BENIGN_EXCEPTIONS = frozenset({"ImportError", "ModuleNotFoundError", "StopIteration",
                               "StopAsyncIteration"})
ABSENT = (-1, None)


def is_presence_test(test: ast.Compare, rank_side: ast.expr) -> bool:
    """``rank != -1``, ``rank == -1``, ``rank is None``, ``rank >= 0``, ``rank < 0``: a test of
    whether a rank exists at all, which every rank of a job answers alike; and the range
    check ``0 <= rank < world_size``."""
    if len(test.ops) == 2 and rank_side is test.comparators[0] and \
            _constant(test.left) == 0 and all(isinstance(op, (ast.LtE, ast.Lt))
                                              for op in test.ops):
        return True  # 0 <= rank < world_size: true on every rank of a valid job
    if len(test.ops) != 1:
        return False
    other = test.comparators[0] if rank_side is test.left else test.left
    value = _constant(other)
    if value is _NOT_CONSTANT:
        return False
    op = type(test.ops[0])
    if op in (ast.Eq, ast.NotEq, ast.Is, ast.IsNot):
        return value in ABSENT
    if rank_side is test.left:
        return (op in (ast.GtE, ast.Lt) and value == 0) or (op in (ast.Gt, ast.LtE) and
                                                             value == -1)
    return (op in (ast.LtE, ast.Gt) and value == 0) or (op in (ast.Lt, ast.GtE) and value == -1)


_NOT_CONSTANT = object()


def _constant(node: ast.expr) -> object:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and \
            isinstance(node.operand, ast.Constant) and isinstance(node.operand.value, int):
        return -node.operand.value
    return _NOT_CONSTANT


def device_move(call: ast.Call) -> ast.expr | None:
    """The moved value of ``x.to(device)``, ``x.cuda(rank)``: the receiver; None otherwise."""
    if isinstance(call.func, ast.Attribute) and call.func.attr in DEVICE_METHODS:
        return call.func.value
    return None


def value_keywords(call: ast.Call) -> list[ast.keyword]:
    """A call's keywords less those that only say where or how a value is kept."""
    return [k for k in call.keywords if k.arg not in DEVICE_KEYWORDS]


def callee_name(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def strip_wrappers(node: ast.expr) -> ast.expr:
    """What a chain of length-preserving wrappers iterates over: ``enumerate(tqdm(loader,
    disable=...))`` -> ``loader``; ``zip(a, b)`` is left as is (its length is the shortest)."""
    while isinstance(node, ast.Call) and node.args and \
            callee_name(node.func) in LENGTH_KEEPING:
        node = node.args[0]
    return node


def same_iteration(a: ast.expr, b: ast.expr) -> bool:
    """True when two expressions iterate over the same items (``tqdm(x)`` and ``x``)."""
    return ast.dump(strip_wrappers(a)) == ast.dump(strip_wrappers(b))


def benign_handler(handler: ast.ExceptHandler) -> bool:
    """An ``except`` that every rank takes alike (an import that failed, a loader's end:
    ``StopIteration``, ``DataloaderExhaustedError``)."""
    kind = handler.type
    names = kind.elts if isinstance(kind, ast.Tuple) else [kind] if kind is not None else []
    return bool(names) and all(callee_name(n) in BENIGN_EXCEPTIONS or
                               "Exhausted" in callee_name(n) for n in names)


DEVICE_WORDS = ("cuda", "xpu", "npu", "mps", "hpu", "xla", "cpu")


def is_device(value: ast.expr | None, module: object) -> bool:
    """``f"cuda:{local_rank}"``, ``torch.device("cuda", rank)``: a device (rank-valued, but its
    type is the same on every rank)."""
    if isinstance(value, ast.JoinedStr):
        return any(isinstance(v, ast.Constant) and isinstance(v.value, str) and
                   v.value.startswith(DEVICE_WORDS) for v in value.values)
    if isinstance(value, ast.Call):
        qualified = getattr(module, "qualified")(value.func) or ""
        return qualified in ("torch.device", "torch.cuda.device")
    return False
