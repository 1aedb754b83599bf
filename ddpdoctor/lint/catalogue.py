"""What ``ddpdoctor lint`` finds in the bug catalogue: the expected finding of every sample bug
(or why it is out of reach), measured against the scripts; ``python docs/tools/lint_catalogue.py``
prints the README's table from them.

Adding a bug to the catalogue: add one line to EXPECTED (tests/integration/test_lint_catalogue.py
holds the linter to it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ddpdoctor.lint.engine import lint_files
from ddpdoctor.lint.findings import LintFinding, Severity


@dataclass(frozen=True)
class Flagged:
    """The finding lint must report for a bug: at the culprit line, of this kind and severity."""

    line: int
    kind: str
    severity: Severity


@dataclass(frozen=True)
class OutOfReach:
    """A bug whose cause is not visible in the source; ``reason`` says why."""

    reason: str


E, W = Severity.ERROR, Severity.WARNING
EXPECTED: dict[str, Flagged | OutOfReach] = {
    "last_batch_hand_split": Flagged(36, "uneven_loop", W),
    "last_batch_iterable_dataset": Flagged(79, "rank_dependent_loop", E),
    "no_set_epoch": Flagged(32, "missing_set_epoch", W),
    "same_seed_augmentation": Flagged(44, "seed_collision", W),
    "worker_numpy_seed": Flagged(52, "seed_collision", W),
    "metric_rank0_only": Flagged(48, "rank_dependent_collective", E),
    "barrier_in_rank0_checkpoint": Flagged(60, "rank_dependent_collective", E),
    "download_first_wrong": Flagged(56, "rank_dependent_collective", E),
    "allgather_uneven_last_batch": Flagged(42, "uneven_loop", W),
    "dtype_mismatch": Flagged(46, "dtype_divergence", W),
    "reduce_order_mismatch": Flagged(58, "uneven_loop", W),
    "early_stop_per_rank": Flagged(50, "rank_dependent_skip", E),
    "crash_mid_epoch": OutOfReach("a corrupt record raises on one rank at run time; no path in "
                                  "the source differs between ranks"),
    "unused_parameters": Flagged(44, "unused_parameters", W),
    "broadcast_object_behind_file_check": Flagged(59, "conditional_collective", W),
    "clean_exit_uneven_no_loader": Flagged(39, "uneven_loop", W),
    "pg_timeout_while_peer_computes": OutOfReach("a timeout shorter than a peer's work: a matter "
                                                 "of durations, not of paths"),
    "subgroup_skip_4ranks": Flagged(32, "rank_dependent_collective", E),
    "two_group_lock_order": Flagged(30, "rank_dependent_order", E),
    "p2p_recv_recv": Flagged(25, "recv_before_send", E),
    "stuck_before_init": OutOfReach("a download with no timeout blocks one rank before "
                                    "init_process_group; no collective depends on a condition"),
    "busy_straggler_finishes": OutOfReach("not a bug but a slow rank: evaluation time is not "
                                          "visible in the source"),
    "lightning_all_gather_global_zero": Flagged(36, "rank_dependent_collective", E),
    "accelerate_gather_main_process": Flagged(44, "rank_dependent_collective", E),
    "ignite_evaluator_rank0": Flagged(42, "rank_dependent_collective", E),
    "transformers_evaluate_one_rank": Flagged(44, "rank_dependent_collective", E),
    "aux_loss_skipped_one_rank": Flagged(45, "unused_parameters", W),
    "frozen_on_one_rank": Flagged(36, "rank_dependent_model", E),
    "store_port_taken": OutOfReach("another process holds the rendezvous port at run time; "
                                   "the code is the same on every rank"),
    "loss_log_extra_allreduce_rank0": Flagged(49, "rank_dependent_collective", E),
    "eval_ddp_forward_rank0": Flagged(46, "rank_dependent_collective", E),
    "nan_loss_skip_one_rank": Flagged(44, "conditional_skip", W),
    "lock_held_across_barrier": Flagged(33, "lock_held_across_collective", E),
    "checkpoint_reentrant_ddp": Flagged(51, "reentrant_checkpoint", E),
    "oom_killed_mid_epoch": OutOfReach("the kernel ends the rank at run time; what grows "
                                       "is memory, not a path in the source"),
    "sampler_seed_per_rank": OutOfReach("the sampler's seed is an expression of the rank; "
                                        "a per-rank seed is right elsewhere (augmentation)"),
    "checkpoint_reentrant_drift": Flagged(47, "reentrant_checkpoint", E),
    "head_loaded_one_rank": OutOfReach("the head is loaded where a cached file exists on that "
                                       "rank's disk; replica_drift reads rank tests only"),
    "lr_scheduler_rank0_only": OutOfReach("not yet seen: replica_drift does not count a "
                                          "scheduler's step() under a rank test"),
    "grad_clip_local_loss": OutOfReach("the clipping threshold is a value from the rank's own "
                                       "loss, not a path that differs"),
    "requires_grad_after_ddp": OutOfReach("requires_grad changes on every rank alike after "
                                          "DDP's construction: no rank test to read"),
    "early_stop_closing_barrier": Flagged(44, "rank_dependent_skip", E),
    "no_sync_token_count": OutOfReach("the no_sync() choice rests on a token count that lint "
                                      "does not follow into the context manager"),
    "checkpoint_on_own_clock": Flagged(41, "conditional_collective", W),
    "time_budget_exit": Flagged(38, "conditional_skip", W),
    "all_to_all_split_own_data": OutOfReach("the split sizes are data (each rank's routing): "
                                            "every rank makes the same call"),
    "dtensor_full_tensor_rank0": Flagged(36, "rank_dependent_collective", E),
    "lightning_log_sync_dist_rank0": Flagged(39, "rank_dependent_collective", E),
    "fsdp2_eval_rank0": OutOfReach("fully_shard() wraps the model in place (no new name): "
                                   "lint does not yet read its forward as a collective"),
    "warmup_lr_by_hand_rank0": Flagged(35, "replica_drift", E),
    "fsdp_full_state_dict_rank0": OutOfReach("state_dict() of an FSDP model is a gather; lint "
                                             "does not read it as a collective"),
    "fabric_barrier_rank0": Flagged(40, "rank_dependent_collective", E),
}


@dataclass(frozen=True)
class Measured:
    """One bug linted: what was expected, and the finding at the culprit line if any."""

    name: str
    expected: Flagged | OutOfReach | None
    hit: LintFinding | None
    findings: tuple[LintFinding, ...]
    fixed_errors: tuple[LintFinding, ...]


def measure(sample_dir: Path | None = None) -> list[Measured]:
    """Lint every catalogue bug and its fixed twin."""
    from ddpdoctor.bugs import CATALOGUE, sample_bugs_dir

    where = sample_dir or sample_bugs_dir()
    rows = []
    for bug in CATALOGUE:
        findings = tuple(lint_files([where / bug.script]))
        fixed = [f for f in lint_files([where / bug.fixed_script]) if f.severity == Severity.ERROR]
        expected = EXPECTED.get(bug.name)
        hit = None
        if isinstance(expected, Flagged):
            hit = next((f for f in findings if f.line == expected.line and
                        f.kind == expected.kind and f.severity == expected.severity), None)
        rows.append(Measured(bug.name, expected, hit, findings, tuple(fixed)))
    return rows
