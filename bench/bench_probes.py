"""Benchmark: the data probes' cost per batch, and the step time with and without them.

    python bench/bench_probes.py [--epochs 30] [--batches 200]

One process records into a scratch run dir exactly as a rank does under `ddpdoctor run`
(a Recorder, the DataLoader patches).  Probes on and off alternate epoch by epoch in the
same run, so noise from other jobs on the machine hits both alike; the tables show
the fastest epoch of each (the least disturbed by other load).  "probe call" times the
probes' own work for one batch in isolation (best of many repeats); "ratio by probe
call" is (step + probe call) / step, the ratio a quiet machine shows.
Per-batch cost: a loop that only draws batches (the probes' whole cost is in
the draw).  Step ratio: the same loop plus a training step (forward, backward, SGD).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

RUN_DIR = tempfile.mkdtemp(prefix="ddpdoctor-bench-probes-")
os.environ["DDPDOCTOR_RUN_DIR"] = RUN_DIR
os.environ.setdefault("RANK", "0")

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, IterableDataset, TensorDataset  # noqa: E402

from ddpdoctor.runtime import data_probes  # noqa: E402
from ddpdoctor.runtime import recorder as R  # noqa: E402


class Stream(IterableDataset):
    """An iterable dataset (no sampler indices: the probes fingerprint the tensors)."""

    def __init__(self, x: torch.Tensor):
        self.x = x

    def __iter__(self):
        return iter(self.x)


def set_probes(on: bool) -> None:
    data_probes._on["batch"] = on


def loaders(batches: int, batch_size: int, features: int) -> dict[str, DataLoader]:
    x = torch.randn(batches * batch_size, features)
    y = torch.randn(batches * batch_size, 1)
    return {
        "map-style, shuffled": DataLoader(TensorDataset(x, y), batch_size=batch_size,
                                          shuffle=True),
        "iterable": DataLoader(Stream(x), batch_size=batch_size),
    }


def time_epoch(loader: DataLoader, step) -> tuple[float, int]:
    n = 0
    t0 = time.perf_counter()
    for b in loader:
        step(b)
        n += 1
    return time.perf_counter() - t0, n


def alternate(loader: DataLoader, step, epochs: int) -> tuple[list[float], list[float], int]:
    on, off = [], []
    n = 0
    time_epoch(loader, step)  # warm-up
    for e in range(epochs):
        for probes in ((True, False) if e % 2 == 0 else (False, True)):
            set_probes(probes)
            dt, n = time_epoch(loader, step)
            (on if probes else off).append(dt)
    set_probes(True)
    return on, off, n


def probe_call(loader: DataLoader, batches: int = 64, repeats: int = 200) -> float:
    """Microseconds of probe work per batch (index fingerprint + batch record), the
    loader's own work left out; the first FIRST_FPS batches of an epoch also fingerprint
    their contents, so this averages over a ``batches``-long epoch."""
    import timeit

    it = iter(loader)
    sample = [next(it) for _ in range(2)]
    index = list(range(loader.batch_size or 1))
    is_map = not isinstance(loader.dataset, IterableDataset)

    def epoch() -> None:
        it.__dict__.pop("_ddpdoctor_epoch", None)
        ep = data_probes._epoch_of(it)
        for i in range(batches):
            if is_map:
                ep.indices.append((data_probes.indices_fingerprint(index), len(index)))
            data_probes._on_batch(it, sample[i & 1])

    best = min(timeit.repeat(epoch, number=1, repeat=repeats))
    return best / batches * 1e6


def make_step(width: int, features: int):
    model = nn.Sequential(nn.Linear(features, width), nn.ReLU(), nn.Dropout(0.1),
                          nn.Linear(width, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step(batch) -> None:
        x = batch[0] if isinstance(batch, (list, tuple)) else batch
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=30, help="epochs each way (default 30)")
    p.add_argument("--batches", type=int, default=200, help="batches an epoch (default 200)")
    p.add_argument("--batch-size", type=int, default=32)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    data_probes.install()
    rec = R.active()
    assert rec is not None, "no recorder: the bench needs DDPDOCTOR_RUN_DIR"
    features = 64

    print(f"per-batch probe cost ({args.batches} batches x {args.epochs} epochs each way, "
          f"batch {args.batch_size}x{features})")
    print(f"{'loader':<22} {'off us/batch':>13} {'on us/batch':>12} {'probe us':>9} "
          f"{'probe call':>11}")
    for name, loader in loaders(args.batches, args.batch_size, features).items():
        on, off, n = alternate(loader, lambda b: None, args.epochs)
        m_on, m_off = min(on) / n * 1e6, min(off) / n * 1e6
        print(f"{name:<22} {m_off:>13.1f} {m_on:>12.1f} {m_on - m_off:>9.1f} "
              f"{probe_call(loader):>11.1f}")

    print("\nstep time with / without the probes (same run, alternating epochs)")
    print(f"{'loader':<22} {'model':<12} {'off ms/step':>11} {'on ms/step':>11} {'ratio':>7} "
          f"{'ratio by probe call':>20}")
    for width in (64, 512):
        step = make_step(width, features)
        for name, loader in loaders(args.batches, args.batch_size, features).items():
            cost = probe_call(loader)
            on, off, n = alternate(loader, step, max(4, args.epochs // 3))
            m_on, m_off = min(on) / n * 1e3, min(off) / n * 1e3
            print(f"{name:<22} {f'MLP {width}':<12} {m_off:>11.3f} {m_on:>11.3f} "
                  f"{m_on / m_off:>7.3f} {1 + cost / (m_off * 1e3):>20.4f}")
    meta = Path(RUN_DIR, "traces", f"pid-{os.getpid()}.meta.jsonl").read_text()
    if "runtime_error" in meta:
        print("\nthe probes reported an error:", [ln for ln in meta.splitlines()
                                                  if "runtime_error" in ln][:3])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
