"""Hugging Face accelerate: what ddpdoctor knows of it."""

from __future__ import annotations

from ddpdoctor.frameworks.framework import Environ, Framework, Modules

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


def seeds_alike(modules: Modules, environ: Environ) -> bool:
    """An Accelerator drives the process (its ``set_seed`` seeds every rank alike)."""
    return "accelerate.accelerator" in modules


FRAMEWORK = Framework(
    "accelerate", PACKAGES, pip="accelerate",
    collectives={"accelerate.utils": OPERATIONS | {"wait_for_everyone"},
                 "accelerate.utils.operations": OPERATIONS},
    receiver_methods={"accelerator": frozenset({"gather", "gather_for_metrics", "reduce",
                                                "wait_for_everyone", "pad_across_processes",
                                                "prepare", "prepare_model"})},
    uniform_results=frozenset({"gather", "gather_for_metrics", "reduce",
                               "pad_across_processes"}),
    backward_receivers=("accelerator",),
    rank_attrs=frozenset({"is_main_process", "is_local_main_process", "process_index",
                          "local_process_index", "is_last_process"}),
    seeds_alike=seeds_alike,
    seed_fix=(
        "accelerate's `set_seed(seed)` seeds every rank alike (identical initial model); "
        "equal dropout on different data is harmless. For per-rank randomness call "
        "`set_seed(seed, device_specific=True)` after building the model, and give "
        "augmenting DataLoaders a generator seeded with `seed + accelerator.process_index`."))
