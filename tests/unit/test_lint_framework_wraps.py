"""ddpdoctor lint's reentrant_checkpoint rule sees DDP applied by Lightning's Trainer and by
accelerate's prepare: a module checkpointed twice reentrantly is flagged at its second checkpoint
under a DDP strategy, and stays clean under static_graph, FSDP/DeepSpeed or one device."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ddpdoctor.lint.engine import lint_files, lint_source

UNIT = Path(__file__).resolve().parent
JOBS = UNIT / "lint_jobs"
COMPAT_JOBS = UNIT.parent / "compat" / "jobs"

LIGHTNING_MODULE = """\
import lightning as L
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


class Shared(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.shared = nn.Linear(8, 8)

    def forward(self, x):
        h = checkpoint(self.shared, x, use_reentrant=True)
        return checkpoint(self.shared, h, use_reentrant=True)
"""
SECOND = 14  # the line of the second checkpoint in both module sources

ACCELERATE_MODULE = """\
import torch
from accelerate import Accelerator, DistributedDataParallelKwargs
from torch import nn
from torch.utils.checkpoint import checkpoint


class Shared(nn.Module):
    def __init__(self):
        super().__init__()
        self.shared = nn.Linear(8, 8)

    def forward(self, x):
        h = checkpoint(self.shared, x)
        return checkpoint(self.shared, h)
"""


def reentrant(module: str, job: str) -> list[tuple[int, str]]:
    findings = lint_source(module + textwrap.dedent(job), "job.py")
    return [(f.line, f.severity.value) for f in findings if f.kind == "reentrant_checkpoint"]


@pytest.mark.parametrize("name, line, static", [
    ("lightning_reentrant.py", 26, "Trainer(strategy=DDPStrategy(static_graph=True))"),
    ("accelerate_reentrant.py", 26,
     "Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(static_graph=True)])"),
])
def test_the_real_jobs_are_flagged_at_the_second_checkpoint_and_their_twins_are_clean(
        name, line, static):
    bug = lint_files([JOBS / name])
    assert [(f.line, f.kind, f.severity.value) for f in bug] == \
        [(line, "reentrant_checkpoint", "error")]
    assert "checkpoint(self.shared, torch.relu(h), use_reentrant=True)" in \
        (JOBS / name).read_text().splitlines()[line - 1]
    assert "Expected to mark a variable ready only once" in bug[0].message
    assert bug[0].fix.startswith("checkpoint(..., use_reentrant=False)")
    assert static in bug[0].fix  # the framework's own way to give DDP static_graph
    assert lint_files([JOBS / name.replace(".py", "_fixed.py")]) == []


@pytest.mark.parametrize("trainer", [
    'L.Trainer(strategy="ddp")',
    'L.Trainer(strategy="DDP_spawn", devices=1)',
    'L.Trainer(strategy="ddp_find_unused_parameters_true")',
    'L.Trainer(strategy=L.pytorch.strategies.DDPStrategy())',
    'L.Trainer(strategy=DDPStrategy(find_unused_parameters=True))',
    'L.Trainer(strategy=DDPStrategy(static_graph=False))',
    'L.Trainer(devices=2)',
    'L.Trainer(accelerator="cpu", devices="2")',
    'L.Trainer(devices=[0, 1])',
    'L.Trainer(devices="0,1")',
    'L.Trainer(num_nodes=2)',
    'L.Trainer(strategy="auto", devices=N_DEVICES)',
    'L.Trainer(strategy=STRATEGY)',
])
def test_a_lightning_ddp_trainer_puts_the_fitted_module_under_ddp(trainer):
    assert reentrant(LIGHTNING_MODULE, f"""
    from lightning.pytorch.strategies import DDPStrategy
    N_DEVICES = 4
    STRATEGY = DDPStrategy()
    trainer = {trainer}
    trainer.fit(Shared(), None)
    """) == [(SECOND, "error")]


@pytest.mark.parametrize("trainer", [
    'L.Trainer(strategy=DDPStrategy(static_graph=True))',
    'L.Trainer(strategy="fsdp", devices=2)',
    'L.Trainer(strategy=FSDPStrategy(), devices=2)',
    'L.Trainer(strategy="deepspeed_stage_2", devices=2)',
    'L.Trainer(devices=1)',
    'L.Trainer()',
    'L.Trainer(devices="auto")',
    'L.Trainer(devices=-1)',
    'L.Trainer(strategy="auto", devices=1, num_nodes=1)',
    'L.Trainer(accelerator="tpu", devices=8)',
    'L.Trainer(strategy="single_device")',
    'L.Trainer(strategy=args.strategy, devices=2)',
    'L.Trainer(**config)',
])
def test_static_graph_sharding_or_one_device_leaves_the_module_clean(trainer):
    assert reentrant(LIGHTNING_MODULE, f"""
    from lightning.pytorch.strategies import DDPStrategy, FSDPStrategy
    trainer = {trainer}
    trainer.fit(Shared(), None)
    """) == []


@pytest.mark.parametrize("job", [
    """
    import pytorch_lightning as pl
    pl.Trainer(strategy="ddp").fit(model=Shared())
    """,
    """
    from lightning.pytorch import Trainer
    model = Shared.load_from_checkpoint("last.ckpt")
    Trainer(devices=2).fit(model.to("cpu"))
    """,
    """
    import lightning.pytorch as pl
    def fit(module, devices):
        trainer = pl.Trainer(strategy="ddp", accelerator="cpu", devices=devices)
        trainer.fit(module, None)
    def main():
        fit(Shared(), devices=2)
    """,
])
def test_lightning_spellings_and_the_module_passed_through_a_function(job):
    assert reentrant(LIGHTNING_MODULE, job) == [(SECOND, "error")]


def test_a_fit_that_is_not_a_lightning_trainers_or_a_module_fitted_alone_stays_clean():
    assert reentrant(LIGHTNING_MODULE, """
    from transformers import Trainer
    from sklearn.linear_model import LinearRegression
    Trainer(model=Shared()).train()
    LinearRegression().fit(Shared(), None)
    trainer = L.Trainer(strategy="ddp")
    trainer.validate(Shared())
    """) == []


def test_an_unresolved_lightning_module_is_a_warning():
    assert reentrant(LIGHTNING_MODULE, """
    import sys
    def main(model):
        L.Trainer(strategy="ddp").fit(model)
    """) == [(SECOND, "warning")]


@pytest.mark.parametrize("job", [
    """
    accelerator = Accelerator(cpu=True)
    model, opt = accelerator.prepare(Shared(), torch.optim.SGD([], lr=0.1))
    """,
    """
    accelerator = Accelerator()
    model = Shared()
    model = accelerator.prepare_model(model)
    """,
    """
    handlers = [DistributedDataParallelKwargs(find_unused_parameters=True)]
    accelerator = Accelerator(kwargs_handlers=handlers)
    opt, model = accelerator.prepare(opt, Shared())
    """,
    """
    accelerator = Accelerator(
        kwargs_handlers=[DistributedDataParallelKwargs(static_graph=False)])
    accelerator.prepare(Shared())
    """,
])
def test_accelerate_prepare_puts_the_model_under_ddp(job):
    assert reentrant(ACCELERATE_MODULE, job) == [(SECOND, "error")]


def test_accelerate_in_a_trainer_class_through_self_attributes():
    assert reentrant(ACCELERATE_MODULE, """
    class Runner:
        def __init__(self, model):
            self.accelerator = Accelerator(cpu=True)
            self.model = model

        def setup(self):
            self.model = self.accelerator.prepare(self.model)

    Runner(Shared()).setup()
    """) == [(SECOND, "error")]


@pytest.mark.parametrize("job", [
    """
    accelerator = Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(static_graph=True)])
    accelerator.prepare(Shared())
    """,
    """
    ddp_kwargs = DistributedDataParallelKwargs(static_graph=True)
    accelerator = Accelerator(kwargs_handlers=[ddp_kwargs])
    accelerator.prepare(Shared())
    """,
    """
    from accelerate import FullyShardedDataParallelPlugin
    accelerator = Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin())
    accelerator.prepare(Shared())
    """,
    """
    accelerator = Accelerator()
    accelerator.prepare_model(Shared(), evaluation_mode=True)
    """,
    """
    class Pipeline:
        def prepare(self, model):
            return model
    Pipeline().prepare(Shared())
    """,
])
def test_accelerate_static_graph_fsdp_evaluation_or_another_prepare_stays_clean(job):
    assert reentrant(ACCELERATE_MODULE, job) == []


def test_no_error_or_warning_on_the_compat_jobs():
    jobs = sorted(COMPAT_JOBS.glob("*.py"))
    assert len(jobs) >= 5
    assert [(f.file, f.line, f.kind) for f in lint_files(jobs)] == []


def test_a_submodule_of_the_fitted_module_in_another_file_is_under_ddp(tmp_path):
    (tmp_path / "blocks.py").write_text(textwrap.dedent("""\
        from torch import nn
        from torch.utils.checkpoint import checkpoint


        class Encoder(nn.Module):
            def __init__(self):
                super().__init__()
                self.shared = nn.Linear(8, 8)

            def forward(self, h):
                for _ in range(3):
                    h = checkpoint(self.shared, h)
                return h
        """))
    (tmp_path / "train.py").write_text(textwrap.dedent("""\
        import lightning as L
        from blocks import Encoder


        class Model(L.LightningModule):
            def __init__(self):
                super().__init__()
                self.encoder = Encoder()


        if __name__ == "__main__":
            L.Trainer(accelerator="cpu", devices=2).fit(Model())
        """))
    found = lint_files([tmp_path])
    assert [(Path(f.file).name, f.line, f.kind, f.severity.value) for f in found] == \
        [("blocks.py", 12, "reentrant_checkpoint", "error")]
    assert "in the loop of line 11" in found[0].message
    (tmp_path / "train.py").write_text((tmp_path / "train.py").read_text().replace(
        "devices=2", "devices=1"))
    assert lint_files([tmp_path]) == []


FABRIC_MODULE = LIGHTNING_MODULE.replace("class Shared(L.LightningModule):",
                                         "class Shared(nn.Module):             ")


@pytest.mark.parametrize("job", [
    """
    fabric = L.Fabric(accelerator="cpu", strategy="ddp", devices=2)
    model, opt = fabric.setup(Shared(), torch.optim.SGD([], lr=0.1))
    """,
    """
    from lightning.fabric import Fabric
    fabric = Fabric(devices=4)
    model = fabric.setup_module(Shared())
    """,
    """
    from lightning_fabric import Fabric
    from lightning_fabric.strategies import DDPStrategy
    class Runner:
        def __init__(self):
            self.fabric = Fabric(strategy=DDPStrategy(find_unused_parameters=True))

        def run(self, model):
            self.model = self.fabric.setup(module=model)
    Runner().run(Shared())
    """,
])
def test_a_fabric_ddp_setup_puts_the_module_under_ddp(job):
    found = lint_source(FABRIC_MODULE + textwrap.dedent(job), "job.py")
    assert [(f.line, f.severity.value) for f in found if f.kind == "reentrant_checkpoint"] == \
        [(SECOND, "error")]
    assert "Fabric(strategy=DDPStrategy(static_graph=True))" in found[0].fix


@pytest.mark.parametrize("job", [
    """
    from lightning.fabric.strategies import DDPStrategy
    fabric = L.Fabric(strategy=DDPStrategy(static_graph=True), devices=2)
    fabric.setup(Shared())
    """,
    """
    fabric = L.Fabric(strategy="fsdp", devices=2)
    fabric.setup_module(Shared())
    """,
    """
    fabric = L.Fabric(accelerator="cpu")
    fabric.setup(Shared())
    """,
    """
    class Stage:
        def setup(self, model):
            return model
    Stage().setup(Shared())
    """,
])
def test_fabric_static_graph_sharding_one_device_or_another_setup_stays_clean(job):
    assert reentrant(FABRIC_MODULE, job) == []
