"""lint's rules on state every rank must keep alike: a trainer stopped on one rank, a monitored
metric logged on one rank, a collective's tensor shaped by the rank or the data, a replica
changed on one rank after DDP's construction, an object fed rank-local data. Each case marks
the lines that must be flagged with ``# expect: KIND``."""

from __future__ import annotations

from tests.unit.test_lint_rules import check, severities


def test_should_stop_set_on_global_zero():
    findings = check("""
    import lightning.pytorch as pl
    class Stopper(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.is_global_zero and os.path.exists("STOP"):
                trainer.should_stop = True  # expect: rank_dependent_stop
            trainer.strategy.barrier()
        def on_validation_end(self, trainer, pl_module):
            flag = os.path.exists("STOP")
            trainer.should_stop = trainer.strategy.reduce_boolean_decision(flag, all=False)
    """)
    assert severities(findings) == {"error"}


def test_monitored_metric_logged_on_one_rank():
    check("""
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
    class Model(pl.LightningModule):
        def validation_step(self, batch, batch_idx):
            loss = self.layer(batch).sum()
            self.log("val_loss", loss, rank_zero_only=True)  # expect: rank_dependent_log
            self.log("other", loss, rank_zero_only=True)
            if self.trainer.is_global_zero:
                self.log_dict({"val_acc": loss})  # expect: rank_dependent_log
            self.log("val_acc", loss, sync_dist=True)
    callbacks = [ModelCheckpoint(monitor="val_loss"), EarlyStopping(monitor="val_acc")]
    """)


def test_collective_payload_shaped_by_rank_or_data():
    findings = check("""
    rank = dist.get_rank()
    n = 100 if rank == 0 else 200
    x = torch.ones(n, 8).to(rank)
    dist.all_reduce(x)  # expect: rank_dependent_shape
    y = torch.ones(8, 8).to(rank)
    dist.all_reduce(y)
    def gather_preds(outputs, threshold):
        local = [o for o in outputs if o.item() > threshold]
        t = torch.tensor(local)
        dist.all_reduce(t)  # expect: uneven_shape
        fixed = torch.tensor([len(local)])
        dist.all_reduce(fixed)
    """)
    assert severities(findings) == {"error", "warning"}


def test_replica_changed_on_one_rank_after_ddp():
    check("""
    def train(rank, world):
        rank = dist.get_rank()
        world = dist.get_world_size()
        model = nn.Linear(4, 4)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        if rank == 0:
            model.load_state_dict(torch.load("init.pt"))  # before DDP: broadcast at wrap
        model = DDP(model)
        if rank == 0:
            model.module.reset_parameters()  # expect: replica_drift
            optimizer.load_state_dict(torch.load("opt.pt"))  # expect: replica_drift
            for group in optimizer.param_groups:
                group["lr"] = 0.01  # expect: replica_drift
            nn.init.zeros_(model.module.bias)  # expect: replica_drift
        for group in optimizer.param_groups:
            group["lr"] = 0.01
        model.module.reset_parameters()
    """)


def test_object_fed_rank_local_loss_holds_rank_local_state():
    check("""
    class EarlyStopping:
        def __init__(self):
            self.best, self.early_stop = None, False
        def __call__(self, val_loss):
            self.early_stop = self.best is not None and val_loss > self.best
    def main(model, loader, epochs):
        model = DDP(model)
        stopper = EarlyStopping()
        for epoch in range(epochs):
            for batch in loader:
                loss = model(batch).sum()
                loss.backward()
            stopper(loss.item())
            if stopper.early_stop:
                break  # expect: conditional_skip
    """)
