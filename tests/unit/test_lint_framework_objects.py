"""ddpdoctor lint knows a framework's objects by what built them (a constructor, a
deepspeed.initialize, an annotation, a LightningModule's or a Callback's own attributes),
never by what they are called; a name alone is a fallback that gives warnings at most."""

from __future__ import annotations

import textwrap

from ddpdoctor.lint.engine import lint_source


def found(source: str) -> list[tuple[int, str, str]]:
    findings = lint_source(textwrap.dedent(source), "job.py")
    return [(f.line, f.kind, f.severity.value) for f in findings]


def test_a_fabric_held_under_another_name_is_found():
    assert found("""
    import lightning as L
    def main():
        f = L.Fabric(accelerator="cpu", devices=2)
        f.launch()
        if f.global_rank == 0:
            f.barrier()
    """) == [(7, "rank_dependent_collective", "error")]


def test_a_variable_named_trainer_that_is_not_one_gives_nothing():
    assert found("""
    import torch.distributed as dist
    import lightning as L
    class Loop:
        def fit(self, data):
            return sum(data)
    def main(data):
        trainer = Loop()
        if dist.get_rank() == 0:
            trainer.fit(data)
            trainer.save_checkpoint("x.ckpt")
    """) == []


def test_an_engine_from_deepspeed_initialize_under_another_name():
    assert found("""
    import deepspeed
    import torch.distributed as dist
    def main(net, cfg):
        model, opt, _, _ = deepspeed.initialize(model=net, config=cfg)
        if dist.get_rank() == 0:
            model.save_checkpoint("ckpt")
    """) == [(7, "rank_dependent_collective", "error")]


def test_self_trainer_strategy_in_a_lightning_module():
    assert found("""
    import lightning as L
    class Net(L.LightningModule):
        def on_validation_epoch_end(self):
            if self.global_rank == 0:
                self.trainer.strategy.barrier()
    """) == [(6, "rank_dependent_collective", "error")]


def test_self_accelerator_built_in_init_is_seen_in_other_methods():
    assert found("""
    from accelerate import Accelerator
    class Runner:
        def __init__(self):
            self.acc = Accelerator()
        def save(self):
            if self.acc.is_main_process:
                self.acc.wait_for_everyone()
    """) == [(8, "rank_dependent_collective", "error")]


def test_an_annotated_parameter_and_a_callback_hook():
    assert found("""
    import lightning as L
    from lightning.pytorch.callbacks import Callback
    def save(t: L.Trainer, path):
        if t.is_global_zero:
            t.save_checkpoint(path)
    class Saver(Callback):
        def on_train_epoch_end(self, tr, module):
            if tr.is_global_zero:
                tr.save_checkpoint("x.ckpt")
    """) == [(6, "rank_dependent_collective", "error"), (10, "rank_dependent_collective", "error")]


def test_a_framework_object_by_its_name_alone_is_a_warning():
    assert found("""
    import lightning as L
    from hydra.utils import instantiate
    def main(cfg):
        trainer = instantiate(cfg.trainer)
        if trainer.is_global_zero:
            trainer.save_checkpoint("x.ckpt")
    """) == [(7, "rank_dependent_collective", "warning")]
