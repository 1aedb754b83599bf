"""Hugging Face accelerate: what ddpdoctor knows of it."""

from __future__ import annotations

from ddpdoctor.frameworks.framework import Environ, Framework, FrameworkMethod, Modules

PACKAGES = ("accelerate",)
OPERATIONS = frozenset({"gather", "gather_object", "reduce", "broadcast",
                        "broadcast_object_list", "pad_across_processes"})
# lint: an Accelerator's prepare puts the model under DDP
ACCELERATOR, DDP_KWARGS = "Accelerator", "DistributedDataParallelKwargs"
PREPARE_MODEL = "prepare_model"
PREPARE_METHODS = ("prepare", PREPARE_MODEL)
EVALUATION_KEYWORD = "evaluation_mode"  # prepare_model(m, evaluation_mode=True): no DDP
# Accelerator(...) arguments that make it shard (FSDP, DeepSpeed, Megatron) instead of DDP
NOT_DDP_PLUGINS = frozenset({"fsdp_plugin", "deepspeed_plugin", "deepspeed_plugins",
                             "megatron_lm_plugin"})
STATIC_GRAPH = ("Accelerator(kwargs_handlers=[DistributedDataParallelKwargs("
                "static_graph=True)])")



def _method(name: str, collective: str, always: bool) -> FrameworkMethod:
    return FrameworkMethod("accelerate", "accelerate.accelerator", ACCELERATOR, name, "1.15.0",
                           collective, always)


HIDDEN = (
    _method("save_state", "wait_for_everyone (FSDP, DeepSpeed: their sharded saves)", False),
    _method("get_state_dict", "the gather of a DeepSpeed ZeRO-3 or FSDP state dict", False),
    _method("save_model", "get_state_dict (DeepSpeed ZeRO-3, FSDP: a gather)", False),
    _method("main_process_first", "wait_for_everyone", True),
    _method("local_main_process_first", "wait_for_everyone", True))


def seeds_alike(modules: Modules, environ: Environ) -> bool:
    """An Accelerator drives the process (its ``set_seed`` seeds every rank alike)."""
    return "accelerate.accelerator" in modules


FRAMEWORK = Framework(
    "accelerate", PACKAGES, pip="accelerate",
    collectives={"accelerate.utils": OPERATIONS | {"wait_for_everyone"},
                 "accelerate.utils.operations": OPERATIONS},
    objects={ACCELERATOR: "accelerator"}, name_words={"accelerator": "accelerator"},
    object_methods={"accelerator": frozenset({"gather", "gather_for_metrics", "reduce",
                                                "wait_for_everyone", "pad_across_processes",
                                              "prepare", "prepare_model"})},
    uniform_results=frozenset({"gather", "gather_for_metrics", "reduce",
                               "pad_across_processes"}),
    backward_kinds=("accelerator",),
    rank_attrs=frozenset({"is_main_process", "is_local_main_process", "process_index",
                          "local_process_index", "is_last_process"}),
    hidden=HIDDEN, hidden_kinds=("accelerator",),
    seeds_alike=seeds_alike,
    seed_fix=(
        "accelerate's `set_seed(seed)` seeds every rank alike (identical initial model); "
        "equal dropout on different data is harmless. For per-rank randomness call "
        "`set_seed(seed, device_specific=True)` after building the model, and give "
        "augmenting DataLoaders a generator seeded with `seed + accelerator.process_index`."))
