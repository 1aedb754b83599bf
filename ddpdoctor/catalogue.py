"""The bug catalogue's entries: known DDP bugs from real reports, what ddpdoctor must say of each."""

from __future__ import annotations

from dataclasses import replace

from ddpdoctor.bug_entry import FINDING_KINDS, Bug, Launch  # noqa: F401 (the API)
from ddpdoctor.bug_entry import entry as _bug


# Bugs whose replay (zero tensors, no model, no data) cannot carry what their first finding
# rests on: what differs, and why.
REPLAY_GAPS: dict[str, str] = {
    **{name: "the replicas' parameters (the replay's tensors are zeros, and it has no model)"
       for name in ("checkpoint_reentrant_drift", "head_loaded_one_rank",
                    "lr_scheduler_rank0_only", "grad_clip_local_loss",
                    "requires_grad_after_ddp", "warmup_lr_by_hand_rank0")},
    "no_sync_token_count": (
        "rank 1's replayed synced backward blocks before its bucket all-reduce is "
        "recorded (in a futex), so the replay names rank 1 in a missing_collective, not "
        "the mismatch of its bucket with rank 0's loss all-reduce"),
}

CATALOGUE: tuple[Bug, ...] = (
    _bug("last_batch_hand_split", 2, Launch.SCRIPT,
         "hangs at the end of the epoch: a hand-made split gives rank 0 one batch more",
         "uneven_batches", (1,),
         "article \"DDP分布式的随机卡死,带你从0调试解决\" (seeds/000); pytorch/pytorch#38174",
         "shard with DistributedSampler and drop_last=True"),
    _bug("last_batch_iterable_dataset", 2, Launch.SPAWN,
         "hangs at the end of the epoch: rank 0's IterableDataset shard holds more records",
         "uneven_batches", (1,),
         "pytorch/pytorch#38174; Lightning-AI/pytorch-lightning#20404",
         "all-reduce (MIN) the number of batches first and train exactly that many"),
    _bug("no_set_epoch", 2, Launch.SCRIPT,
         "trains normally, but every epoch sees the data in the same order",
         "stale_shuffle", (0, 1),
         "pytorch/pytorch#31771 and #11324; the DistributedSampler docs' warning",
         "call sampler.set_epoch(epoch) at the start of each epoch"),
    _bug("same_seed_augmentation", 2, Launch.SCRIPT,
         "trains normally, but every rank draws the same random crops and noise",
         "seed_collision", (0, 1),
         "article \"torch.distributed多卡/多GPU/分布式DPP(二)\" (seeds/001); "
         "huggingface/pytorch-image-models#1519",
         "seed each rank differently: torch.manual_seed(SEED + rank)"),
    _bug("worker_numpy_seed", 2, Launch.SPAWN,
         "trains normally, but every DataLoader worker draws the same numpy jitter",
         "seed_collision", (0, 1),
         "pytorch/pytorch#5059; facebookresearch/fairseq#1383",
         "seed numpy in worker_init_fn from torch.initial_seed()"),
    _bug("metric_rank0_only", 3, Launch.SPAWN,
         "hangs (or aborts) after the first epoch: rank 0 all-reduces the validation loss alone",
         "collective_mismatch", (0,),
         "Lightning-AI/pytorch-lightning#19783",
         "call all_reduce on every rank; keep only the print under `if rank == 0`"),
    _bug("barrier_in_rank0_checkpoint", 3, Launch.TORCHRUN,
         "hangs after the first checkpoint: only rank 0 reaches the barrier",
         "collective_mismatch", (0,),
         "article \"torch.distributed多卡/多GPU/分布式DPP(二)\" (seeds/001); "
         "deepspeedai/DeepSpeed#801",
         "move dist.barrier() out of the `if rank == 0` block"),
    _bug("download_first_wrong", 3, Launch.TORCHRUN,
         "hangs before the first step: ranks 1-2 wait in a barrier rank 0 never calls",
         "collective_mismatch", (0,),
         "article \"torch.distributed多卡/多GPU/分布式DPP(二)\" (torch_distributed_zero_first); "
         "Lightning-AI/pytorch-lightning#17733",
         "barrier on both sides: the others before loading, rank 0 after downloading"),
    _bug("allgather_uneven_last_batch", 3, Launch.SPAWN,
         "aborts (gloo) or hangs (NCCL) gathering the last batch's predictions",
         "collective_mismatch", (2,),
         "Lightning-AI/pytorch-lightning#7773; huggingface/accelerate#19",
         "all-gather the sizes, pad to the largest, gather, then trim"),
    _bug("dtype_mismatch", 3, Launch.SCRIPT,
         "hangs in the final metric all-reduce: float32 on two ranks, int64 on the third",
         "collective_mismatch", (2,),
         "modelscope/ms-swift#9550; pytorch/pytorch#150248",
         "give the metric tensor an explicit dtype (float64)"),
    _bug("reduce_order_mismatch", 3, Launch.SPAWN,
         "hangs reducing metrics: rank 0 reduces [pos_hist, loss], the others [loss, pos_hist]",
         "collective_mismatch", (0,),
         "Lightning-AI/torchmetrics#159; facebookresearch/maskrcnn-benchmark#309",
         "create every metric up front and reduce them in sorted(name) order"),
    _bug("early_stop_per_rank", 3, Launch.TORCHRUN,
         "hangs (gloo: fails) after epoch 1: rank 1 stops early alone and exits",
         "missing_collective", (1,),
         "Lightning-AI/pytorch-lightning#379; ultralytics/yolov5#8345",
         "decide together: all-reduce the validation loss before the patience check"),
    _bug("crash_mid_epoch", 2, Launch.SCRIPT,
         "rank 1 dies on a corrupt record at step 3; rank 0 is left in the all-reduce",
         "rank_failed", (1,),
         "Lightning-AI/pytorch-lightning#6430; rwth-i6/returnn#1484",
         "validate the records and shard only the good ones, the same on every rank"),
    _bug("unused_parameters", 2, Launch.TORCHRUN,
         "step 2 raises \"Expected to have finished reduction in the prior iteration\"",
         "rank_failed", (0, 1),
         "pytorch/pytorch#43259; open-mmlab/mmdetection#4742",
         "DDP(model, find_unused_parameters=True), or drop the unused head"),
    _bug("broadcast_object_behind_file_check", 3, Launch.TORCHRUN,
         "hangs at start-up: rank 1 finds a cached file and skips broadcast_object_list",
         "collective_mismatch", (1,),
         "KempnerInstitute/KempnerForge#49",
         "let rank 0 decide and call broadcast_object_list on every rank"),
    # Root cause versus victim: the shapes of the job-wide causal model (who waits for whom).
    _bug("clean_exit_uneven_no_loader", 2, Launch.SCRIPT,
         "rank 0 fails with \"Connection closed by peer\": rank 1 ran out of hand-split "
         "batches and returned cleanly",
         "uneven_batches", (1,),
         "the seed article's last-batch hang, hand-split tensors; pytorch/pytorch#38174",
         "all-reduce (MIN) the number of full batches and train exactly that many",
         hang_timeout=5.0),
    _bug("pg_timeout_while_peer_computes", 2, Launch.TORCHRUN,
         "rank 0 dies of a 4 s process-group timeout while rank 1 still evaluates (12 s)",
         "missing_collective", (1,),
         "gloo/NCCL collective timeouts while one rank evaluates alone (common reports)",
         "a process-group timeout longer than the slowest rank's evaluation",
         hang_timeout=5.0),
    _bug("subgroup_skip_4ranks", 4, Launch.TORCHRUN,
         "hangs: rank 1 skips its pair group's all-reduce once; rank 0 waits in it",
         "missing_collective", (1,),
         "conditional collectives in process subgroups (the \"a rank skips a collective\" "
         "hangs of pytorch/pytorch#38174's family)",
         "all-reduce an empty statistic as zeros instead of skipping the call",
         hang_timeout=5.0),
    _bug("two_group_lock_order", 2, Launch.SCRIPT,
         "hangs: rank 0 reduces on group A then B, rank 1 on B then A",
         "deadlock", (0, 1),
         "collectives on several process groups entered in different orders",
         "one order of the groups' collectives on every rank",
         hang_timeout=5.0),
    _bug("p2p_recv_recv", 2, Launch.SCRIPT,
         "hangs: both pipeline stages post a blocking recv before their send",
         "deadlock", (0, 1),
         "blocking send/recv ordering (why torch has batch_isend_irecv)",
         "rank 0 sends first, rank 1 receives first (or batch_isend_irecv)",
         hang_timeout=5.0),
    _bug("stuck_before_init", 2, Launch.TORCHRUN,
         "hangs at start-up: rank 1 blocks in a download before init_process_group",
         "missing_collective", (1,),
         "start-up hangs from one rank blocking in a download or a file lock before init",
         "a timeout on the download, with a cached fallback",
         hang_timeout=5.0),
    _bug("busy_straggler_finishes", 2, Launch.SCRIPT,
         "rank 1 evaluates for 12 s while rank 0 waits: slow, not hung; the job must finish",
         "straggler", (1,),
         "uneven evaluation shards; ddpdoctor's own rule: a rank whose CPU time advances is "
         "a straggler, not a hang",
         "shard the evaluation evenly",
         hang_timeout=5.0, finishes=True),
    # DDP's own errors in plain words, and failures that are not in the user's code.
    _bug("aux_loss_skipped_one_rank", 2, Launch.TORCHRUN,
         "iteration 4 raises \"Expected to have finished reduction in the prior iteration\" "
         "on rank 1 alone: its batch 3 had no rare-class sample, so its aux head got no grad",
         "rank_failed", (1,),
         "pytorch/pytorch#43259; open-mmlab/mmdetection#4742 (different branches in DDP mode)",
         "use the aux head every iteration (its loss weighted by zero when the class is absent)",
         hang_timeout=5.0),
    _bug("frozen_on_one_rank", 3, Launch.TORCHRUN,
         "every rank raises \"DDP expects same model across all ranks\": rank 1 froze the "
         "encoder's weight from its own copy of the config",
         "rank_failed", (1,),
         "yifan123/flow_grpo#245; NVIDIA/apex#46",
         "read the config on rank 0 and broadcast it before building the model",
         hang_timeout=5.0),
    _bug("store_port_taken", 2, Launch.SPAWN,
         "init_process_group raises DistNetworkError (EADDRINUSE) on rank 0: another process "
         "holds the job's fixed MASTER_PORT",
         "rank_failed", (0,),
         "pytorch/pytorch#73320 and #85604; meta-pytorch/torchtune#392",
         "let the job take a free port (torchrun --standalone / --rdzv-endpoint localhost:0)",
         hang_timeout=5.0),
    _bug("lock_held_across_barrier", 2, Launch.TORCHRUN,
         "hangs: rank 0 waits in a barrier while it holds a file lock; rank 1 is blocked in "
         "flock on that lock",
         "missing_collective", (0,),
         "modelscope/mcore-bridge#47; pmodels/mpich#1997",
         "release the lock before the barrier",
         hang_timeout=5.0),
)


# -- framework bugs: the classic hangs of Lightning, accelerate, ignite and transformers ----
FRAMEWORK_BUGS: tuple[Bug, ...] = (
    _bug("lightning_all_gather_global_zero", 2, Launch.TORCHRUN,
         "hangs after the first epoch: self.all_gather runs under trainer.is_global_zero",
         "collective_mismatch", (0,),
         "Lightning-AI/pytorch-lightning#16541 and #20683",
         "call self.all_gather on every rank; keep only the print under is_global_zero",
         hang_timeout=10.0),
    _bug("accelerate_gather_main_process", 2, Launch.TORCHRUN,
         "hangs after the first epoch: accelerator.gather runs under is_main_process",
         "collective_mismatch", (0,),
         "huggingface/accelerate#2785 and #2733; huggingface/transformers#31532",
         "call accelerator.gather on every rank; keep only the print under is_main_process",
         hang_timeout=10.0),
    _bug("ignite_evaluator_rank0", 2, Launch.TORCHRUN,
         "hangs after the first epoch: the evaluator (its metric all-reduces) runs on rank 0",
         "collective_mismatch", (0,),
         "pytorch-ignite docs (metrics sync across ranks); huggingface/transformers#31532",
         "run the evaluator on every rank; keep only the print on rank 0",
         hang_timeout=10.0),
    _bug("transformers_evaluate_one_rank", 2, Launch.TORCHRUN,
         "hangs after the first epoch: a callback runs trainer.evaluate() on rank 0 only",
         "collective_mismatch", (0,),
         "huggingface/transformers#31532",
         "call trainer.evaluate() on every rank; keep only the print on rank 0",
         hang_timeout=10.0),
)
CATALOGUE = CATALOGUE + FRAMEWORK_BUGS


# -- why, not only who: out of step, collectives the user never wrote, skipped iterations --
WHY_BUGS: tuple[Bug, ...] = (
    _bug("loss_log_extra_allreduce_rank0", 2, Launch.TORCHRUN,
         "hangs in epoch 2 at the loss log: rank 0 alone all-reduced its validation loss, "
         "which met rank 1's next loss all-reduce",
         "collective_mismatch", (0,),
         "Lightning-AI/pytorch-lightning#19783; pytorch/pytorch#38174",
         "all-reduce the validation loss on every rank; keep only the print on rank 0"),
    _bug("eval_ddp_forward_rank0", 2, Launch.TORCHRUN,
         "hangs at the end: rank 0 evaluates with the DDP model, whose forward broadcasts "
         "the BatchNorm buffers",
         "missing_collective", (0,),
         "pytorch/pytorch#37764 and #23658; Lightning-AI/pytorch-lightning#4178",
         "evaluate on model.module (no collective) on rank 0"),
    _bug("nan_loss_skip_one_rank", 2, Launch.TORCHRUN,
         "trains out of step, then hangs: rank 1 alone skips a batch with a NaN loss "
         "(`continue` before backward)",
         "missing_collective", (1,),
         "huggingface/transformers#14347; Lightning-AI/pytorch-lightning#5243",
         "all-reduce the non-finite flag (MAX) and skip the batch on every rank together"),
    _bug("checkpoint_reentrant_ddp", 2, Launch.TORCHRUN,
         "every rank's first backward raises \"Expected to mark a variable ready only once\": "
         "a weight-shared layer is checkpointed twice with use_reentrant=True",
         "rank_failed", (0, 1),
         "microsoft/FocalNet#4; huggingface/accelerate#389; pytorch/pytorch#65537 "
         "(torch's message: \"multiple `checkpoint` functions to wrap the same part\")",
         "checkpoint(..., use_reentrant=False) (or DDP(..., static_graph=True))",
         hang_timeout=5.0),
)
CATALOGUE = CATALOGUE + WHY_BUGS


# -- right on shapes nobody catalogued: a rank killed without a word, data seeded per rank --
REPLAY_GAPS["oom_killed_mid_epoch"] = (
    "a rank killed by a signal leaves no exception to raise again: the replay's rank 1 just "
    "stops calling, which reads as a rank that ran fewer steps (uneven_batches, rank 1)")
RUNTIME_BUGS: tuple[Bug, ...] = (
    _bug("sampler_seed_per_rank", 2, Launch.TORCHRUN,
         "trains normally, but each rank's DistributedSampler slices its own permutation: a "
         "quarter of the data is never drawn each epoch, a quarter twice",
         "duplicate_data", (0, 1),
         "NVlabs/LongLive#71; mlcommons/training#625; open-mmlab/mmengine#142",
         "DistributedSampler(data, seed=BASE_SEED): one seed on every rank"),
    _bug("oom_killed_mid_epoch", 2, Launch.TORCHRUN,
         "rank 1 vanishes at step 3 with no traceback (the OOM killer's SIGKILL); rank 0 is "
         "left in the gradient all-reduce",
         "rank_failed", (1,),
         "Lightning-AI/pytorch-lightning#6430; pytorch/pytorch#13246",
         "keep detached values (or nothing) in the debug cache, not the autograd graph",
         hang_timeout=5.0),
)
CATALOGUE = CATALOGUE + RUNTIME_BUGS


# -- replicas that drift apart: no error, no hang, the ranks train different models ---------
DRIFT_BUGS: tuple[Bug, ...] = (
    _bug("checkpoint_reentrant_drift", 2, Launch.TORCHRUN,
         "trains without an error, but the replicas drift apart from the first step: a "
         "shared layer under two reentrant checkpoints, straight on the batch",
         "replica_divergence", (0, 1),
         "torch's DDP notes (reentrant checkpointing unsupported); microsoft/FocalNet#4; "
         "huggingface/accelerate#389; pytorch/pytorch#65537",
         "checkpoint(..., use_reentrant=False)", hang_timeout=5.0),
    _bug("head_loaded_one_rank", 2, Launch.TORCHRUN,
         "trains without an error, but rank 1 loaded a cached head after DDP was built: the "
         "replicas differ from the first step",
         "replica_divergence", (0, 1),
         "DDP's construction is the only time it copies rank 0's parameters (torch's DDP "
         "docs: load checkpoints on every rank or before wrapping)",
         "load before building DDP (or on every rank)", hang_timeout=5.0),
    _bug("lr_scheduler_rank0_only", 2, Launch.TORCHRUN,
         "trains without an error, but only rank 0 steps the LR scheduler: the ranks train "
         "with different learning rates",
         "replica_divergence", (0, 1),
         "a scheduler step placed under the rank-0 logging block",
         "step the scheduler on every rank; only the print under `if rank == 0`",
         hang_timeout=5.0),
    _bug("grad_clip_local_loss", 2, Launch.TORCHRUN,
         "trains without an error, but each rank clips the averaged gradient with its own "
         "threshold (from its own loss): the replicas drift apart",
         "replica_divergence", (0, 1),
         "adaptive gradient clipping from per-rank statistics",
         "compute the threshold from values every rank shares (all-reduce the loss first)",
         hang_timeout=5.0),
    _bug("warmup_lr_by_hand_rank0", 2, Launch.TORCHRUN,
         "trains without an error, but an lr warmup written by hand runs on rank 0 only: the "
         "ranks step with different learning rates from the first step",
         "replica_divergence", (0, 1),
         "an lr warmup written by hand inside the rank-0 logging block (lr_scheduler_rank0_only "
         "without a scheduler: only the setting differs)",
         "set the lr on every rank; only the print under `if rank == 0`", hang_timeout=5.0),
    _bug("requires_grad_after_ddp", 2, Launch.TORCHRUN,
         "trains without an error, but a layer unfrozen after DDP was built is stepped with "
         "each rank's own, unaveraged gradient",
         "replica_divergence", (0, 1),
         "torch's DDP docs (the parameters that require gradients are fixed at construction); "
         "gradual unfreezing in fine-tuning",
         "build a new DDP after changing requires_grad", hang_timeout=5.0),
)
CATALOGUE = CATALOGUE + DRIFT_BUGS


# -- blame from evidence, the why from facts: one rank against one, a decision on its own input
SHAPE_BUGS: tuple[Bug, ...] = (
    _bug("early_stop_closing_barrier", 2, Launch.TORCHRUN,
         "hangs after epoch 1: rank 1 stops early on its own validation score and waits in "
         "the closing barrier; rank 0 waits in the next epoch's gradient all-reduce",
         "collective_mismatch", (1,),
         "isi-nlp/rtg#11; Lightning-AI/pytorch-lightning#379",
         "all-reduce the validation loss before the check", hang_timeout=5.0),
    _bug("no_sync_token_count", 2, Launch.TORCHRUN,
         "hangs: rank 1 leaves no_sync() on its own token count one micro-batch early; its "
         "gradient all-reduce meets rank 0's loss all-reduce",
         "collective_mismatch", (1,),
         "modelscope/FunASR#3472; karpathy/nanochat#33",
         "all-reduce (MIN) the token count before deciding to sync", hang_timeout=5.0),
    _bug("checkpoint_on_own_clock", 4, Launch.TORCHRUN,
         "hangs: rank 1's clock says checkpoint first; it saves and waits in the barrier "
         "while ranks 0, 2 and 3 wait in the next gradient all-reduce",
         "collective_mismatch", (1,),
         "instructlab/training#566; Lightning-AI ModelCheckpoint(train_time_interval)",
         "rank 0 reads the clock and broadcasts the decision", hang_timeout=5.0),
    _bug("time_budget_exit", 2, Launch.TORCHRUN,
         "rank 1's own clock says the time budget is spent: it leaves the loop and exits; "
         "rank 0 waits in the next gradient all-reduce (gloo: connection closed)",
         "uneven_batches", (1,),
         "Lightning-AI/pytorch-lightning#379's family (max_time read per rank)",
         "rank 0 reads the clock and broadcasts the decision", hang_timeout=5.0),
)
CATALOGUE = CATALOGUE + SHAPE_BUGS


# -- collectives the user never wrote, and sizes nobody exchanged: named at the user's line --
HIDDEN_BUGS: tuple[Bug, ...] = (
    _bug("all_to_all_split_own_data", 2, Launch.TORCHRUN,
         "aborts at step 3: each rank sizes the all_to_all_single from its own routing; the "
         "splits disagree the first time a batch routes unevenly",
         "collective_mismatch", (0,),
         "pytorch/pytorch#111432; deepspeedai/DeepSpeed#5066 (MoE dispatch split sizes)",
         "all_to_all the split sizes first, then the tokens", hang_timeout=5.0),
    _bug("dtensor_full_tensor_rank0", 2, Launch.TORCHRUN,
         "hangs at step 2: rank 0 logs a DTensor's norm with full_tensor(), an all-gather "
         "the other ranks never call",
         "collective_mismatch", (0,),
         "pytorch/pytorch#125740 and #121356; huggingface/accelerate#3254",
         "call full_tensor() on every rank; keep only the print on rank 0", hang_timeout=5.0),
    _bug("fsdp2_eval_rank0", 2, Launch.TORCHRUN,
         "aborts (gloo) or hangs (NCCL) after step 1: rank 0 evaluates the FSDP2-sharded "
         "model alone, and its forward all-gathers the parameters",
         "collective_mismatch", (0,),
         "pytorch/pytorch#76949 and #77562",
         "run the sharded model's forward on every rank; keep only the print on rank 0",
         hang_timeout=5.0),
    _bug("lightning_log_sync_dist_rank0", 2, Launch.TORCHRUN,
         "hangs at the end of the first epoch: rank 0 alone logs a metric with "
         "sync_dist=True, which Lightning all-reduces later, inside trainer.fit",
         "collective_mismatch", (0,),
         "Lightning-AI/pytorch-lightning#18150 and #19604",
         "log the synced metric on every rank", hang_timeout=10.0),
)
CATALOGUE = CATALOGUE + HIDDEN_BUGS


# -- engines beyond DDP: a collective inside an engine's API, called on one rank -------------
ENGINE_BUGS: tuple[Bug, ...] = (
    _bug("fsdp_full_state_dict_rank0", 2, Launch.TORCHRUN,
         "hangs (gloo: aborts) after step 2: rank 0 takes the FSDP model's full state dict "
         "alone; gathering it is a collective the other ranks never call",
         "collective_mismatch", (0,),
         "pytorch/pytorch#122903 and #73383",
         "call state_dict() on every rank; only rank 0 saves", hang_timeout=5.0),
    _bug("fabric_barrier_rank0", 2, Launch.TORCHRUN,
         "hangs after step 3: rank 0 saves a checkpoint and waits in fabric.barrier() alone; "
         "rank 1 waits in the next step's gradient all-reduce",
         "collective_mismatch", (0,),
         "Lightning Fabric's API docs (barrier: every process must enter it)",
         "fabric.barrier() on every rank; only the save under the rank test", hang_timeout=6.0),
)
CATALOGUE = CATALOGUE + ENGINE_BUGS
CATALOGUE = tuple(replace(b, replay_gap=REPLAY_GAPS.get(b.name, "")) for b in CATALOGUE)
