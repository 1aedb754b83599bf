"""torch's FullyShardedDataParallel: what ddpdoctor knows of it.  It shards the model: its
ranks hold no replicas to compare (runtime/replica_watch.py tracks DDP only), and it marks
no variable ready, so DDP's unused-parameter rule is not its own (lint)."""

from __future__ import annotations

from ddpdoctor.frameworks.framework import Framework

WRAPPERS = frozenset({
    "torch.distributed.fsdp.FullyShardedDataParallel",
    "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel"})
WRAPPER_NAME = "FullyShardedDataParallel"  # a wrap however it was imported
# its optimizer state dicts gather (or scatter) the sharded state across ranks
OPTIM_STATE = frozenset({"optim_state_dict", "full_optim_state_dict",
                         "sharded_optim_state_dict", "scatter_full_optim_state_dict"})

FRAMEWORK = Framework("fsdp", collectives={wrapper: OPTIM_STATE for wrapper in WRAPPERS},
                      ddp_wrappers=WRAPPERS)
