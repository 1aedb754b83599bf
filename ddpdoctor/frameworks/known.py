"""The frameworks ddpdoctor knows, in one list, and the views of them that the runtime,
lint and analysis read.  To add a framework: write its module (a ``FRAMEWORK`` record and
what is its own), and add it to ``ALL``."""

from __future__ import annotations

from typing import Iterator, Mapping

from ddpdoctor.frameworks import accelerate, deepspeed, fsdp, ignite, lightning, transformers
from ddpdoctor.frameworks.framework import Environ, Framework, FrameworkMethod, Modules

# in the order a process that uses several is said to be driven by (the Trainer wraps
# accelerate; Lightning may run beside either)
ALL: tuple[Framework, ...] = (transformers.FRAMEWORK, lightning.FRAMEWORK,
                              accelerate.FRAMEWORK, ignite.FRAMEWORK, deepspeed.FRAMEWORK,
                              fsdp.FRAMEWORK)

# libraries known only as callers of torch's collectives for the user: their frames are
# framework sites too
CALLER_PACKAGES = ("composer", "fairscale", "torchtune", "torchtitan", "megatron",
                   "colossalai", "trl", "peft", "timm", "torchrec", "torchmetrics")


def by_name(name: str) -> Framework | None:
    return next((f for f in ALL if f.name == name), None)


def packages() -> frozenset[str]:
    """Top-level packages whose frames are a framework's, never the user's code."""
    return frozenset(p for f in ALL for p in f.packages) | frozenset(CALLER_PACKAGES)


def install_names() -> dict[str, str]:
    """A framework's import name -> the name to install it by (those ddpdoctor's test
    extras install)."""
    return {f.packages[0]: f.pip for f in ALL if f.packages and f.pip}


def collectives() -> dict[str, frozenset[str]]:
    """Module -> its functions that run a collective, over every framework."""
    return _merged(f.collectives for f in ALL)


def object_methods() -> dict[str, frozenset[str]]:
    """A kind of framework object -> the methods that run a collective on it."""
    return _merged(f.object_methods for f in ALL)


def object_kind(qualified: str) -> str | None:
    """The kind of object a framework's class builds (``lightning.Fabric`` -> ``fabric``)."""
    top, last = qualified.split(".", 1)[0], qualified.rsplit(".", 1)[-1]
    for f in ALL:
        if top in f.packages and last in f.objects:
            return f.objects[last]
    return None


def object_attrs() -> dict[tuple[str, str], str]:
    return {k: v for f in ALL for k, v in f.object_attrs.items()}


def tuple_builders() -> dict[str, str]:
    return {k: v for f in ALL for k, v in f.tuple_builders.items()}


def hooks() -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    return {k: v for f in ALL for k, v in f.hooks.items()}


def name_words() -> dict[str, frozenset[str]]:
    """A word of a receiver's name -> the kinds of framework object it may be (a fallback)."""
    out: dict[str, frozenset[str]] = {}
    for f in ALL:
        for word, kind in f.name_words.items():
            out[word] = out.get(word, frozenset()) | {kind}
    return out


def object_kinds() -> frozenset[str]:
    """Every kind of framework object lint follows."""
    return frozenset(k for f in ALL for k in [*f.objects.values(), *f.object_attrs.values(),
                                              *f.tuple_builders.values()])


def uniform_results() -> frozenset[str]:
    return frozenset(m for f in ALL for m in f.uniform_results)


def backward_kinds() -> tuple[str, ...]:
    return tuple(r for f in ALL for r in f.backward_kinds)


def ddp_wrappers() -> frozenset[str]:
    return frozenset(w for f in ALL for w in f.ddp_wrappers)


def rank_calls() -> frozenset[str]:
    return frozenset(c for f in ALL for c in f.rank_calls)


def world_calls() -> frozenset[str]:
    return frozenset(c for f in ALL for c in f.world_calls)


def rank_attrs() -> frozenset[str]:
    return frozenset(a for f in ALL for a in f.rank_attrs)


def hidden_methods() -> tuple[FrameworkMethod, ...]:
    """Every framework method known to issue collectives the user never wrote."""
    return tuple(m for f in ALL for m in f.hidden)


def hidden_frameworks() -> dict[str, tuple[str, ...]]:
    """A kind of framework object -> the packages whose hidden methods it may have."""
    out: dict[str, tuple[str, ...]] = {}
    for f in ALL:
        for kind in f.hidden_kinds:
            out[kind] = out.get(kind, ()) + f.packages
    return out


def seeding_framework(modules: Modules, environ: Environ) -> str | None:
    """The framework that drives this process and seeds every rank alike on purpose (an
    identical initial model), if one does."""
    return next((f.name for f in ALL if f.seeds_alike(modules, environ)), None)


def seed_fix(name: str | None) -> str:
    """The fix for a seed collision framework ``name`` made ("" when none is known)."""
    found = by_name(name) if name else None
    return found.seed_fix if found is not None else ""


def _merged(parts: Iterator[Mapping[str, frozenset[str]]]) -> dict[str, frozenset[str]]:
    out: dict[str, frozenset[str]] = {}
    for part in parts:
        for key, names in part.items():
            out[key] = out.get(key, frozenset()) | names
    return out
