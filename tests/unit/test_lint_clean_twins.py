"""Classes of false errors lint gave on fixed (clean) scripts, each beside its buggy twin that
must still be flagged: helpers that issue the same collectives on both sides of a rank test, a
submodule used through a helper the forward hands ``self`` to, ``static_graph=True``, writes
into a tensor the rank built, and a loop count from the size of a rank's own data."""

from __future__ import annotations

from tests.unit.test_lint_rules import check, severities


def test_helpers_that_issue_the_same_collectives_balance_a_rank_test():
    """Even ranks take one helper, odd ranks another: each issues one all_reduce then the DDP
    forward, so every rank issues the same sequence.  A helper that issues one more does not."""
    check("""
    def labelled(model, x):
        n = torch.ones(1)
        dist.all_reduce(n)
        return model(x).sum()

    def pseudo(model, x):
        with torch.no_grad():
            conf = x.mean().reshape(1)
        dist.all_reduce(conf)
        return model(x).sum() * conf

    def chatty(model, x):
        dist.all_reduce(torch.ones(1))
        dist.barrier()
        return model(x).sum()

    def main(x):
        rank = dist.get_rank()
        model = DDP(nn.Linear(8, 2))
        for step in range(4):
            if rank % 2 == 0:
                loss = labelled(model, x)
            else:
                loss = pseudo(model, x)
            loss.backward()
        for step in range(4):
            if rank % 2 == 0:
                loss = labelled(model, x)  # expect: rank_dependent_collective
            else:
                loss = chatty(model, x)
            loss.backward()
    """)


DETECTOR = """
class Detector(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Linear(8, 8)
        self.cls_head = nn.Linear(8, 3)
        self.box_head = nn.Linear(8, 4)

    def forward(self, x, boxes):
        return losses(self, self.backbone(x), boxes)

def losses(det, feats, boxes):
    loss = det.cls_head(feats).sum()
    if boxes.numel() == 0:
        return {EARLY}
    return loss + det.box_head(feats).sum()

def main():
    model = DDP(Detector())  {MARK}
"""


def test_a_submodule_used_through_a_helper_given_self_is_used():
    """The forward hands ``self`` to a function of the file: what that function reads of it on
    every path counts; the twin whose early return skips ``box_head`` is still flagged."""
    check(DETECTOR.replace("{EARLY}", "loss + det.box_head(feats).sum() * 0.0")
          .replace("{MARK}", ""))
    findings = check(DETECTOR.replace("{EARLY}", "loss").replace("{MARK}",
                                                                   "# expect: unused_parameters"))
    assert "box_head" in findings[0].message


def test_static_graph_accepts_a_submodule_never_used_but_not_one_used_sometimes():
    check("""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(8, 8)
            self.legacy = nn.Linear(8, 8)  # kept for old checkpoints, never called
            self.aux = nn.Linear(8, 2)

        def forward(self, x, rare):
            h = self.body(x)
            if rare:
                return h, self.aux(h)
            return h, None

    class Lean(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(8, 8)
            self.legacy = nn.Linear(8, 8)

        def forward(self, x):
            return self.body(x)

    def main():
        a = DDP(Lean(), static_graph=True)
        b = DDP(Lean())  # expect: unused_parameters
        c = DDP(Net(), static_graph=True)  # expect: unused_parameters
    """)


def test_writes_into_a_tensor_the_rank_built_change_no_model_and_no_shape():
    """A pipeline stage's received activation gets ``requires_grad_()`` (a tensor, not the
    model); a loss accumulated into a one-element buffer keeps its shape.  The model's own
    ``requires_grad_`` under a rank test, and a buffer sized by the rank, are still flagged."""
    check("""
    def main(net, loader):
        rank = dist.get_rank()
        stage = rank % 2
        if rank == 0:
            net.head.requires_grad_(False)  # expect: rank_dependent_model
        model = DDP(net)
        running = torch.zeros(1)
        for x in loader:
            if stage == 1:
                act = torch.empty(8, 32)
                dist.recv(act, src=rank - 1)
                act.requires_grad_()
                act[0] = 0.0
                model(act).sum().backward()
            else:
                model(x).sum().backward()
            running += model(x).sum().detach()
        dist.all_reduce(running)
        sized = torch.zeros(rank + 1)
        dist.all_reduce(sized)  # expect: rank_dependent_shape
    """)


def test_a_loop_over_the_size_of_a_ranks_own_data_is_a_warning_not_an_error():
    """``x, y = shard(replica)`` gives each rank its own data: its size differs only as shares
    do (micro-batch counts rounded up from 30 and 32 rows are equal), so the loop gets a
    warning; a loop bounded by the rank itself stays an error."""
    findings = check("""
    SIZES = {0: 30, 1: 32}

    def shard(replica):
        g = torch.Generator().manual_seed(replica)
        x = torch.randn(SIZES[replica], 16, generator=g)
        return x, (x[:, 0] > 0).long()

    def main():
        rank = dist.get_rank()
        model = DDP(nn.Linear(16, 2))
        x, y = shard(rank // 2)
        n_micro = (len(x) + 7) // 8
        for m in range(n_micro):
            model(x[m * 8:(m + 1) * 8]).sum().backward()  # expect: uneven_loop
        for m in range(len(shard(rank // 2)[0])):
            model(x).sum().backward()  # expect: uneven_loop
        for m in range(rank + 2):
            model(x).sum().backward()  # expect: rank_dependent_loop
    """)
    by_kind = {f.kind: f.severity.value for f in findings}
    assert by_kind == {"uneven_loop": "warning", "rank_dependent_loop": "error"}
    assert severities(findings) == {"warning", "error"}


def test_a_parameter_named_rank_is_no_rank_until_a_rank_is_passed_to_it():
    """Lint decides from what the code does, not from names: a helper's parameter called
    ``rank`` holds the rank only where a caller hands it one (or the process group is told
    it is the rank, or it is a spawn target's first argument)."""
    check("""
    def pick(rank, t):
        if rank == 0:
            dist.all_reduce(t)

    def told(rank, t):
        dist.init_process_group("gloo", rank=rank, world_size=2)
        if rank == 0:
            dist.all_reduce(t)  # expect: rank_dependent_collective

    class Worker:
        def __init__(self, cfg):
            self.rank = dist.get_rank()
            self.cfg = cfg

        def step(self, t):
            if self.cfg.rank == 0:  # a setting of that name, not the rank
                dist.all_reduce(t)
            if self.rank == 0:
                dist.all_reduce(t)  # expect: rank_dependent_collective

    def main(t):
        pick(0, t)
        pick(len(t), t)
    """)


def test_a_parameter_is_a_ddp_model_when_a_caller_hands_it_one_whatever_its_name():
    """A helper's forward is DDP's when the helper is given the wrapped model (``net``, or a
    name lint never saw, through another helper); a parameter called ``model`` that is given
    the plain module is no DDP forward."""
    check("""
    def forward_only(m, x):
        return m(x)

    def evaluate(thing, x):
        return forward_only(thing, x)

    def plain(model, x):
        return model(x)

    def main(net, x):
        rank = dist.get_rank()
        wrapped = DDP(net)
        if rank == 0:
            evaluate(wrapped, x)  # expect: rank_dependent_collective
        if rank == 0:
            plain(net, x)
    """)
