"""PyTorch Lightning (and Fabric): what ddpdoctor knows of it."""

from __future__ import annotations

from ddpdoctor.frameworks.framework import Environ, Framework, FrameworkMethod, Modules

PACKAGES = ("lightning", "pytorch_lightning", "lightning_fabric")

# runtime/lightning_log.py: ``self.log(..., sync_dist=True)`` in a step only stores the
# value; at the end of the epoch the result collection reduces it across ranks
# (``_ResultMetric.compute`` -> ``strategy.reduce``) from inside ``trainer.fit``
MODULE_MODULES = ("lightning.pytorch.core.module", "pytorch_lightning.core.module")
RESULT_MODULES = ("lightning.pytorch.trainer.connectors.logger_connector.result",
                  "pytorch_lightning.trainer.connectors.logger_connector.result")
DATALOADER_SUFFIX = "/dataloader_idx_"  # add_dataloader_idx's suffix on a logged key

# lint: collectives of a LightningModule on ``self``, and its logging that syncs
SELF_COLLECTIVES = frozenset({"all_gather"})
LOG_METHODS = frozenset({"log", "log_dict"})  # a collective with sync_dist=True
SYNC_KEYWORD = "sync_dist"
RANK_ZERO_KEYWORD = "rank_zero_only"  # self.log(..., rank_zero_only=True): logged on rank 0
MANUAL_BACKWARD = "manual_backward"  # self.manual_backward(loss): DDP's all-reduce
# lint: a Trainer's fit or a Fabric's setup puts the module under DDP with a DDP strategy
TRAINER, FABRIC, DDP_STRATEGY = "Trainer", "Fabric", "DDPStrategy"
TRAINER_METHODS = ("fit",)
FABRIC_METHODS = ("setup", "setup_module")
BUILDER = "load_from_checkpoint"  # Net.load_from_checkpoint(path) is a Net
TRAINER_STATIC_GRAPH = "Trainer(strategy=DDPStrategy(static_graph=True))"
FABRIC_STATIC_GRAPH = "Fabric(strategy=DDPStrategy(static_graph=True))"

GLOBAL_SEED_ENV = "PL_GLOBAL_SEED"  # set by seed_everything(seed)
SEED_WORKERS_ENV = "PL_SEED_WORKERS"  # "1": seed_everything(seed, workers=True)


def seeds_alike(modules: Modules, environ: Environ) -> bool:
    """``seed_everything(seed)`` ran in a process that uses Lightning."""
    return environ.get(GLOBAL_SEED_ENV) is not None and any(p in modules for p in (
        "lightning.pytorch", "pytorch_lightning", "lightning"))


def seeds_workers(environ: Environ) -> bool:
    """``seed_everything(seed, workers=True)``: each DataLoader worker's seed is its own."""
    return environ.get(SEED_WORKERS_ENV) == "1"


FRAMEWORK = Framework(
    "lightning", PACKAGES, pip="lightning",
    objects={"Fabric": "fabric", "Trainer": "trainer", "LightningModule": "lightning_module",
             "Callback": "callback", "Strategy": "strategy", "DDPStrategy": "strategy",
             "FSDPStrategy": "strategy", "DeepSpeedStrategy": "strategy",
             "ParallelStrategy": "strategy", "ModelParallelStrategy": "strategy"},
    object_attrs={("lightning_module", "trainer"): "trainer",
                  ("lightning_module", "fabric"): "fabric",
                  ("trainer", "lightning_module"): "lightning_module",
                  ("trainer", "strategy"): "strategy", ("fabric", "strategy"): "strategy"},
    name_words={"fabric": "fabric", "strategy": "strategy", "trainer": "trainer"},
    hooks={"callback": (("on_", "setup", "teardown"), ("trainer", "lightning_module"))},
    object_methods={"fabric": frozenset({"all_gather", "all_reduce", "barrier", "broadcast",
                                         "setup"}),
                    "strategy": frozenset({"barrier", "broadcast", "reduce", "all_gather",
                                           "reduce_boolean_decision"}),
                    "trainer": frozenset({"fit", "validate", "test", "predict"}),
                    "lightning_module": frozenset({"all_gather"})},
    uniform_results=frozenset({"all_gather", "all_reduce", "broadcast", "reduce",
                               "reduce_boolean_decision"}),
    backward_kinds=("fabric",),
    rank_attrs=frozenset({"is_global_zero", "global_rank", "local_rank", "node_rank"}),
    hidden=tuple(FrameworkMethod(package, f"{module}.trainer.trainer", TRAINER,
                                 "save_checkpoint", "2.6.6", "strategy.barrier", True)
                 for package, module in (("lightning", "lightning.pytorch"),
                                         ("pytorch_lightning", "pytorch_lightning"))),
    hidden_kinds=("trainer",),
    seeds_alike=seeds_alike,
    seed_fix=(
        "Lightning's `seed_everything(seed)` seeds every rank alike on purpose (identical "
        "initial model); equal dropout on different data is by design. Use "
        "`seed_everything(seed, workers=True)` so each DataLoader worker gets a seed "
        "derived from the rank too, and draw main-process augmentations from a generator "
        "seeded with `seed + self.global_rank`."))
