"""What lint knows of calls it does not read: the builtins, standard library, torch and numpy
functions and the methods of strings, containers, tensors and paths whose result depends on
their arguments as they are; the calls that read a file's contents; the calls that split a
sequence into parts; and how a call's arguments bind a function's parameters."""

from __future__ import annotations

import ast

LOAD_CALLS = frozenset({"torch.load", "json.load", "pickle.load", "numpy.load", "yaml.safe_load",
                        "yaml.load", "safetensors.torch.load_file", "torch.jit.load"})
KNOWN_FUNCTIONS = frozenset({
    "int", "float", "str", "bool", "len", "abs", "min", "max", "round", "sum", "sorted", "list",
    "tuple", "set", "frozenset", "dict", "enumerate", "zip", "range", "reversed", "any", "all",
    "divmod", "pow", "format", "repr", "iter", "next", "map", "filter", "hash", "ord", "chr",
    "getattr", "isinstance", "hasattr", "type", "bytes", "slice", "vars", "open"})
KNOWN_MODULES = ("math.", "operator.", "numpy.", "torch.", "os.", "itertools.", "functools.",
                 "json.", "re.", "time.", "random.", "collections.", "datetime.", "pathlib.",
                 "copy.", "string.", "statistics.", "pickle.", "shutil.", "glob.", "socket.",
                 "contextlib.", "typing.", "dataclasses.", "einops.", "tqdm.")
KNOWN_METHODS = frozenset({
    # str, bytes
    "format", "split", "rsplit", "join", "startswith", "endswith", "lower", "upper", "strip",
    "lstrip", "rstrip", "replace", "zfill", "encode", "decode", "partition", "rpartition",
    "splitlines", "isdigit", "find", "rfind",
    # containers
    "get", "items", "keys", "values", "copy", "index", "count", "pop", "popitem",
    # tensors and arrays
    "item", "tolist", "numpy", "sum", "mean", "max", "min", "abs", "sqrt", "exp", "log",
    "float", "double", "half", "bfloat16", "int", "long", "bool", "to", "cuda", "cpu",
    "detach", "clone", "contiguous", "view", "reshape", "size", "numel", "dim", "squeeze",
    "unsqueeze", "flatten", "permute", "transpose", "t", "expand", "repeat", "norm", "std",
    "var", "argmax", "argmin", "eq", "ne", "gt", "lt", "ge", "le", "isnan", "isinf",
    "isfinite", "any", "all", "type", "type_as", "div", "mul", "add", "sub", "pow", "neg",
    "round", "floor", "ceil", "clamp", "nonzero", "sort", "topk", "cumsum", "prod",
    "masked_fill", "split", "chunk", "data", "sign", "square", "add_", "mul_", "div_",
    "sub_", "zero_", "fill_", "copy_", "clamp_", "astype",
    # paths
    "exists", "is_file", "is_dir", "glob", "rglob", "iterdir", "stat", "joinpath",
    "with_suffix", "with_name", "resolve", "absolute", "read_text", "read_bytes", "open"})


def known_call(name: str, call: ast.Call) -> bool:
    """A call whose meaning lint knows: a builtin, the standard library's or torch's and
    numpy's functions, the methods of strings, containers, tensors and paths (what such a call
    returns depends on its arguments as they are); anything else is read as unseen."""
    if isinstance(call.func, ast.Attribute) and call.func.attr in KNOWN_METHODS:
        return True
    return name in KNOWN_FUNCTIONS or name.startswith(KNOWN_MODULES)


def short(node: ast.expr) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 40 else "..." + text[-37:]


def bound_arguments(call: ast.Call, node: ast.AST, method: bool) -> dict[str, ast.expr]:
    """The arguments of ``call`` by the name of the parameter of ``node`` they bind (a
    method's first parameter, ``self``, is bound by its receiver); starred ones left out."""
    args = getattr(node, "args")
    positional = [a.arg for a in [*args.posonlyargs, *args.args]]
    if method and positional and positional[0] in ("self", "cls"):
        positional = positional[1:]
    named = set(positional) | {a.arg for a in args.kwonlyargs}
    out: dict[str, ast.expr] = {}
    for name, value in zip(positional, call.args):
        if isinstance(value, ast.Starred):
            break
        out[name] = value
    for k in call.keywords:
        if k.arg in named:
            out[k.arg] = k.value
    return out


SPLITS = frozenset({"split", "chunk", "array_split", "tensor_split"})


def splits(node: ast.expr) -> bool:
    """A call that splits a sequence into parts (``torch.split(x, n)``, ``np.array_split``):
    the part a rank takes is its share, whose size may differ from the others'."""
    return isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)) and \
        (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) in SPLITS
