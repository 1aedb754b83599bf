"""Framework: what ddpdoctor knows of one training framework, as one typed record."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

Modules = Mapping[str, object]  # sys.modules
Environ = Mapping[str, str]  # os.environ


def never(modules: Modules, environ: Environ) -> bool:
    return False


@dataclass(frozen=True)
class FrameworkMethod:
    """A framework method that issues (or may issue) a collective the user never wrote:
    lint reads the installed source (lint/hidden_collectives.py), else this record.

    Args:
        package: the distribution whose installed source is read (``lightning``).
        module: the module that defines the class (``lightning.pytorch.trainer.trainer``).
        cls: the class (``Trainer``); method: the method (``save_checkpoint``).
        version: the version the record was read from.
        collective: what the method issues, per the record.
        always: every call issues it (False: some configurations only).
    """

    package: str
    module: str
    cls: str
    method: str
    version: str
    collective: str
    always: bool


@dataclass(frozen=True)
class Framework:
    """One framework.

    name: how ddpdoctor names it (the ``framework`` of an ``rng`` meta event).
    packages: its top-level import names; their frames are framework sites, never the
        user's code (runtime/callsites.py), and they are what a script imports.
    pip: the name to install it by (``ddpdoctor bugs run`` says so when it is missing).
    collectives: module -> its functions that run a collective on every rank (lint).
    objects: its classes (by name) -> the kind of object they build, which lint follows from
        the construction, an annotation or a subclass, never from a variable's name
        (``Fabric`` -> ``fabric``) (lint).
    object_attrs: (an object's kind, its attribute) -> the kind of object the attribute holds
        (``(trainer, strategy)`` -> ``strategy``) (lint).
    tuple_builders: qualified calls that return a tuple whose first item is an object of a
        kind (``deepspeed.initialize`` -> ``engine``) (lint).
    hooks: a kind of class -> (the prefixes of its hook methods, the kinds of their
        parameters after ``self``): a Lightning Callback's ``on_*(self, trainer, pl_module)``.
    name_words: a word of a receiver's name -> the kind of object it may be, when lint did not
        see the object built: a fallback whose findings are warnings at most (lint).
    object_methods: a kind of object -> the methods that run a collective on it
        (``accelerator.gather``) (lint).
    uniform_results: methods whose result is the same on every rank (lint).
    backward_kinds: kinds of object whose ``backward()`` runs DDP's gradient
        all-reduce (``accelerator.backward(loss)``) (lint).
    ddp_wrappers: qualified calls that put a model under DDP (or FSDP) (lint).
    rank_calls, world_calls: qualified calls that return this rank, the world size (lint).
    rank_attrs: attributes that hold the rank or a test of it (``trainer.is_global_zero``)
        (lint).
    hidden: its methods that issue collectives the user never wrote (lint).
    hidden_kinds: the kinds of its objects (``trainer``, ``engine``) whose methods ``hidden``
        names (lint).
    seeds_alike: does this framework drive the process (``sys.modules``, ``os.environ``)
        and seed every rank alike on purpose, for an identical initial model (runtime)?
    seed_fix: the fix a seed collision it made calls for (analysis/detectors/seeds.py).
    """

    name: str
    packages: tuple[str, ...] = ()
    pip: str = ""
    collectives: Mapping[str, frozenset[str]] = field(default_factory=dict)
    objects: Mapping[str, str] = field(default_factory=dict)
    object_attrs: Mapping[tuple[str, str], str] = field(default_factory=dict)
    tuple_builders: Mapping[str, str] = field(default_factory=dict)
    hooks: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = field(default_factory=dict)
    name_words: Mapping[str, str] = field(default_factory=dict)
    object_methods: Mapping[str, frozenset[str]] = field(default_factory=dict)
    uniform_results: frozenset[str] = frozenset()
    backward_kinds: tuple[str, ...] = ()
    ddp_wrappers: frozenset[str] = frozenset()
    rank_calls: frozenset[str] = frozenset()
    world_calls: frozenset[str] = frozenset()
    rank_attrs: frozenset[str] = frozenset()
    hidden: tuple[FrameworkMethod, ...] = ()
    hidden_kinds: tuple[str, ...] = ()
    seeds_alike: Callable[[Modules, Environ], bool] = never
    seed_fix: str = ""
