"""PyTorch-Ignite: what ddpdoctor knows of it."""

from __future__ import annotations

from ddpdoctor.frameworks.framework import Framework

AUTO_MODEL = "ignite.distributed.auto_model"  # puts the model under DDP
AUTO_DATALOADER = "auto_dataloader"  # builds a DataLoader (with a DistributedSampler)
# an evaluator (or trainer) built with metrics all-reduces them when it runs
EVALUATOR_BUILDERS = ("create_supervised_evaluator", "create_supervised_trainer")
METRIC_MODULES = ("ignite.metrics.",)  # a metric's compute() syncs across ranks

FRAMEWORK = Framework(
    "ignite", ("ignite",), pip="pytorch-ignite",
    collectives={"ignite.distributed": frozenset({"all_reduce", "all_gather", "broadcast",
                                                  "barrier", "new_group", "auto_model"})},
    ddp_wrappers=frozenset({AUTO_MODEL}),
    rank_calls=frozenset({"ignite.distributed.get_rank", "ignite.distributed.get_local_rank",
                          "ignite.distributed.get_node_rank"}),
    world_calls=frozenset({"ignite.distributed.get_world_size",
                           "ignite.distributed.get_nproc_per_node"}))
