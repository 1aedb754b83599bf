"""The replica checks inside a real (one-rank, gloo) DDP process: what the meta log holds after
scheduled steps, a re-initialised layer, a loaded state, a scheduler and a frozen layer; the
model pickles while its counting hooks are armed (torch.save of a DDP model)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

JOB = textwrap.dedent("""
    import ddpdoctor.runtime as runtime
    runtime.activate()
    import torch, torch.distributed as dist, pickle
    from torch import nn
    dist.init_process_group("gloo", init_method="file://" + {store!r}, rank=0, world_size=1)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    model = nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)
    for step in range(1, 5):
        opt.zero_grad()
        model(torch.randn(3, 4)).sum().backward(); pickle.loads(pickle.dumps(model))
        opt.step()
        sched.step()
        if step == 1:
            net[1].reset_parameters()  # line 18: a re-init after DDP was built
        if step == 2:
            net[0].load_state_dict(nn.Linear(4, 4).state_dict())  # line 20
        if step == 3:
            net[1].bias.requires_grad_(False)
    dist.destroy_process_group()
""")


def test_checks_writes_and_settings_reach_the_meta_log(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(JOB.format(store=str(tmp_path / "store")))
    env = dict(os.environ, DDPDOCTOR_RUN_DIR=str(tmp_path / "run"), OMP_NUM_THREADS="1")
    env.pop("DDPDOCTOR_REPLICA_EVERY", None)
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    [meta] = (tmp_path / "run" / "traces").glob("*.meta.jsonl")
    events = [json.loads(line) for line in meta.read_text().splitlines()]
    assert not [e for e in events if e["event"] == "runtime_error"], events
    [made] = [e for e in events if e["event"] == "replica_set"]
    assert made["params"] == ["0.weight", "0.bias", "1.weight", "1.bias"]
    assert made["site"].endswith("job.py:9") and made["ranks"] == [0]
    checks = [e for e in events if e["event"] == "replica_check"]
    assert [c["step"] for c in checks] == [1, 2, 4]  # powers of two before the interval
    first, last = checks[0], checks[-1]
    assert all(p is not None and type(p[0]) is int for p in first["params"] + first["grads"])
    assert first["hyper"][0]["lr"] == 0.1 and first["hyper"][0]["weight_decay"] == 0.01
    assert first["group_of"] == [0, 0, 0, 0] and first["buffers"] is None
    assert last["flipped"] == [3] and last["grads"][3] is None  # frozen: no gradient
    assert last["versions"][2] > last["versions"][3]  # the re-init wrote to 1.weight
    assert last["schedulers"] == [{"name": "StepLR", "steps": 3, "site": str(script) + ":16"}]
    writes = [(w["what"], w["params"], w["step"], w["site"].rsplit(":", 1)[1])
              for w in events if w["event"] == "replica_write"]
    assert ("torch.nn.init.kaiming_uniform_", ["1.weight"], 1, "18") in writes
    assert ("load_state_dict", ["0.weight", "0.bias"], 2, "20") in writes
