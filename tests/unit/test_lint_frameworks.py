"""ddpdoctor lint knows the implicit collectives of DDP and the frameworks: one test an idiom,
each a collective under a rank condition (flagged) beside the same call on every rank (clean)."""

from __future__ import annotations

import textwrap

from ddpdoctor.lint.engine import lint_source


def flagged(source: str) -> list[tuple[int, str, str]]:
    findings = lint_source(textwrap.dedent(source), "job.py")
    return [(f.line, f.kind, f.collective) for f in findings]


def test_lightning_all_gather_under_is_global_zero():
    assert flagged("""
    import lightning as L
    class M(L.LightningModule):
        def on_train_epoch_end(self):
            x = self.all_gather(self.loss)
            if self.trainer.is_global_zero:
                y = self.all_gather(self.loss)
    """) == [(7, "rank_dependent_collective", "self.all_gather")]


def test_lightning_log_sync_dist_and_strategy_barrier():
    assert flagged("""
    import lightning as L
    class M(L.LightningModule):
        def validation_step(self, batch, i):
            self.log("a", 1.0, sync_dist=True)
            if self.global_rank == 0:
                self.log("b", 1.0)
                self.log("c", 1.0, sync_dist=True)
                self.trainer.strategy.barrier()
    """) == [(8, "rank_dependent_collective", "log(sync_dist=True)")]


def test_lightning_strategy_broadcast():
    assert flagged("""
    def setup(trainer, path):
        if trainer.is_global_zero:
            path = trainer.strategy.broadcast(path)
    """) == [(4, "rank_dependent_collective", "strategy.broadcast")]


def test_accelerate_helpers_under_is_main_process():
    found = flagged("""
    from accelerate import Accelerator
    accelerator = Accelerator()
    def evaluate(preds):
        all_preds = accelerator.gather_for_metrics(preds)
        if accelerator.is_main_process:
            accelerator.wait_for_everyone()
        if accelerator.is_local_main_process:
            accelerator.reduce(preds)
        if accelerator.process_index == 0:
            accelerator.pad_across_processes(preds)
    """)
    assert found == [(7, "rank_dependent_collective", "accelerator.wait_for_everyone"),
                     (9, "rank_dependent_collective", "accelerator.reduce"),
                     (11, "rank_dependent_collective", "accelerator.pad_across_processes")]


def test_accelerate_on_main_process_decorator():
    assert flagged("""
    from accelerate import Accelerator
    accelerator = Accelerator()
    @accelerator.on_main_process
    def report(x):
        accelerator.gather(x)
    """) == [(6, "rank_dependent_collective", "accelerator.gather")]


def test_ignite_idist_and_evaluator():
    found = flagged("""
    import ignite.distributed as idist
    from ignite.engine import create_supervised_evaluator
    from ignite.metrics import Accuracy
    def run(model, val, t):
        evaluator = create_supervised_evaluator(model, metrics={"acc": Accuracy()})
        evaluator.run(val)
        if idist.get_rank() == 0:
            evaluator.run(val)
        if idist.get_local_rank() == 0:
            idist.all_reduce(t)
        other = create_supervised_evaluator(model)
        if idist.get_rank() == 0:
            other.run(val)
    """)
    assert found == [(9, "rank_dependent_collective", "evaluator.run"),
                     (11, "rank_dependent_collective", "all_reduce")]


def test_transformers_trainer_evaluate():
    assert flagged("""
    from transformers import TrainerCallback
    class Cb(TrainerCallback):
        def on_epoch_end(self, args, state, control, **kwargs):
            metrics = self.trainer.evaluate()
            if state.is_world_process_zero:
                print(metrics)
                self.trainer.predict(self.data)
    """) == [(8, "rank_dependent_collective", "trainer.predict")]


def test_torchmetrics_compute():
    assert flagged("""
    import torch.distributed as dist
    import torchmetrics
    def evaluate(preds, target):
        metric = torchmetrics.Accuracy(task="binary")
        metric.update(preds, target)
        value = metric.compute()
        if dist.get_rank() == 0:
            print(value, metric.compute())
    """) == [(9, "rank_dependent_collective", "metric.compute")]


def test_zero_consolidate_state_dict():
    assert flagged("""
    import torch.distributed as dist
    def save(opt, rank):
        rank = dist.get_rank()
        opt.consolidate_state_dict(to=0)
        if rank == 0:
            opt.consolidate_state_dict(to=0)
    """) == [(7, "rank_dependent_collective", "consolidate_state_dict")]


def test_syncbatchnorm_forward_even_without_grad():
    assert flagged("""
    import torch
    from torch import nn
    def evaluate(model, x, rank):
        rank = dist.get_rank()
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
        if rank == 0:
            with torch.no_grad():
                model(x)
    """) == [(9, "rank_dependent_collective", "SyncBatchNorm forward")]


def test_ddp_forward_backward_and_construction():
    assert flagged("""
    import os
    from torch.nn.parallel import DistributedDataParallel as DDP
    def main(net, x):
        rank = int(os.environ["LOCAL_RANK"])
        if rank == 0:
            model = DDP(net)
        model = DDP(net)
        loss = model(x).sum()
        if rank == 0:
            loss.backward()
    """) == [(7, "rank_dependent_collective", "DDP construction"),
             (11, "rank_dependent_collective", "backward")]


def test_ddp_no_sync_is_no_collective():
    assert flagged("""
    from torch.nn.parallel import DistributedDataParallel as DDP
    def main(net, x, rank):
        rank = dist.get_rank()
        model = DDP(net)
        if rank == 0:
            with model.no_sync():
                model(x).sum().backward()
    """) == []


def test_torch_distributed_object_collectives_and_groups():
    assert flagged("""
    import torch.distributed as dist
    from torch.distributed import broadcast_object_list
    def main(rank, box):
        rank = dist.get_rank()
        if rank == 0:
            broadcast_object_list(box, src=0)
        if rank in (0, 1):
            g = dist.new_group([0, 1])
        if rank == 0:
            dist.destroy_process_group()
    """) == [(7, "rank_dependent_collective", "broadcast_object_list"),
             (9, "rank_dependent_collective", "new_group"),
             (11, "rank_dependent_collective", "destroy_process_group")]


def test_spawn_target_first_argument_is_the_rank():
    assert flagged("""
    import torch.distributed as dist
    import torch.multiprocessing as mp
    def worker(i, world):
        if i == 0:
            dist.barrier()
    mp.spawn(worker, args=(2,), nprocs=2)
    """) == [(6, "rank_dependent_collective", "barrier")]
