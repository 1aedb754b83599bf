"""Random augmentation drawn alike on every rank: a Dataset's draws from a global RNG seeded
with the same value everywhere, or DataLoader workers whose seeds derive from it."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ddpdoctor.lint.findings import Severity
from ddpdoctor.lint.module import ParsedModule
from ddpdoctor.lint.rules import Draft

KIND = "seed_collision"
MAIN_MESSAGE = ("{cls} draws from the global {family} RNG, seeded here with the same value on "
                "every rank: every rank draws the same augmentations")
MAIN_FIX = "seed each rank differently (e.g. SEED + rank) or give the Dataset its own generator"
WORKER_MESSAGE = ("the workers of this DataLoader draw {family} random numbers in {cls}, seeded "
                  "from {source}, the same on every rank: the ranks' augmentations repeat")
WORKER_FIX = ("pass generator=torch.Generator().manual_seed(SEED + rank) (or a worker_init_fn "
              "that seeds from torch.initial_seed())")
NUMPY_EXEMPT = frozenset({"default_rng", "RandomState", "Generator", "seed", "SeedSequence",
                          "get_state", "set_state", "PCG64", "MT19937"})
PYTHON_EXEMPT = frozenset({"Random", "SystemRandom", "seed", "getstate", "setstate"})
TORCH_DRAWS = frozenset({"rand", "randn", "randint", "randperm", "bernoulli", "multinomial",
                         "normal", "rand_like", "randn_like", "randint_like"})
SEED_CALLS = {"torch.manual_seed": ("torch",), "torch.random.manual_seed": ("torch",),
              "numpy.random.seed": ("numpy",), "random.seed": ("python",)}
SEED_ALL = ("seed_everything", "set_seed")


@dataclass(frozen=True)
class SeedCall:
    """A global RNG seeded in the file, and whether the seed differs between ranks."""

    families: tuple[str, ...]
    line: int
    per_rank: bool


@dataclass(frozen=True)
class LoaderCall:
    """A DataLoader over an instance of a Dataset class of the file."""

    line: int
    dataset_class: str
    workers: bool
    worker_init_fn: bool
    generator: bool
    generator_per_rank: bool


def seed_families(call: ast.Call, module: ParsedModule) -> tuple[str, ...] | None:
    """Which global RNGs the call seeds, if it is a seeding call."""
    name = module.qualified(call.func) or ""
    if name in SEED_CALLS:
        return SEED_CALLS[name]
    if name.endswith(SEED_ALL):
        return ("torch", "numpy", "python")
    return None


def draws(cls: ast.ClassDef, module: ParsedModule) -> set[str]:
    """The global RNGs a Dataset class draws from outside ``__init__``."""
    found: set[str] = set()
    for item in cls.body:
        if not isinstance(item, ast.FunctionDef) or item.name == "__init__":
            continue
        for node in ast.walk(item):
            if not isinstance(node, ast.Call):
                continue
            name = module.qualified(node.func) or ""
            last = name.rsplit(".", 1)[-1]
            if name.startswith("numpy.random.") and last not in NUMPY_EXEMPT:
                found.add("numpy")
            elif name.startswith("random.") and name.count(".") == 1 and last not in PYTHON_EXEMPT:
                found.add("python")
            elif name.startswith("torch.") and last in TORCH_DRAWS and name.count(".") == 1 and \
                    not any(k.arg == "generator" for k in node.keywords):
                found.add("torch")
    return found


def check(loaders: list[LoaderCall], seeds: list[SeedCall],
          dataset_draws: dict[str, set[str]]) -> list[Draft]:
    """Rule: a Dataset that draws from a global RNG collides across ranks when (in the main
    process) that RNG is seeded alike on every rank, or (in workers) the workers' base seed
    comes from a torch RNG seeded alike (no worker_init_fn, no per-rank generator)."""
    drafts: list[Draft] = []
    flagged: set[int] = set()
    shared_torch = [s for s in seeds if "torch" in s.families and not s.per_rank]
    for loader in loaders:
        families = dataset_draws.get(loader.dataset_class, set())
        if not families:
            continue
        family = "/".join(sorted(families))
        if loader.workers:
            if loader.worker_init_fn or (loader.generator and loader.generator_per_rank):
                continue
            if loader.generator:
                source = "its generator"
            elif shared_torch:
                source = f"torch's global seed (line {shared_torch[0].line})"
            else:
                continue
            drafts.append(Draft(KIND, Severity.WARNING, loader.line, "DataLoader", None,
                                WORKER_MESSAGE.format(family=family, cls=loader.dataset_class,
                                                      source=source), WORKER_FIX))
            continue
        for seed in seeds:
            shared = set(seed.families) & families
            if shared and not seed.per_rank and seed.line not in flagged:
                flagged.add(seed.line)
                drafts.append(Draft(KIND, Severity.WARNING, seed.line, "manual_seed", None,
                                    MAIN_MESSAGE.format(cls=loader.dataset_class,
                                                        family="/".join(sorted(shared))),
                                    MAIN_FIX))
    return drafts
