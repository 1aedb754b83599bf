"""The data probes' batch counts in a real process: the header's loader-progress table is
exact at any moment, held-back BATCH records reach the ring by the process's exit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from ddpdoctor.analysis.detectors.loader_epochs import epochs_of
from ddpdoctor.analysis.load import rank_run
from ddpdoctor.runtime import batch_records
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.reader import read_trace

SCRIPT = textwrap.dedent("""
    import os, signal, sys
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    from ddpdoctor.runtime import data_probes
    data_probes.install()
    ds = TensorDataset(torch.arange(400.0).reshape(400, 1))
    train = DataLoader(ds, batch_size=2, shuffle=True)
    val = DataLoader(ds, batch_size=100)
    for epoch in range(2):
        for i, b in enumerate(train):
            if epoch == 1 and i == 10:  # more short epochs than slots while the long one runs
                for _ in range(40):
                    sum(1 for _ in val)
            if epoch == 1 and i == 150:
                if sys.argv[1] == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                break
""")


def _run(tmp_path: Path, how: str) -> tuple[int, dict]:
    env = {**os.environ, "DDPDOCTOR_RUN_DIR": str(tmp_path), "RANK": "0",
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-c", SCRIPT, how], env=env, capture_output=True,
                          text=True, timeout=300)
    (ring,) = (tmp_path / "traces").glob("*.ring")
    trace = read_trace(ring)
    assert not trace.meta_events("runtime_error")
    epochs = epochs_of(rank_run(trace))
    return done.returncode, epochs


def _train_epochs(epochs: dict) -> list:
    """The training loader's epochs (200 batches of 2), told from the 4-batch validation."""
    train = [k for k, f in epochs.items() if f.ran > 4]
    return [epochs[k] for k in sorted(train)]


def test_a_killed_rank_leaves_its_exact_batch_count(tmp_path: Path) -> None:
    code, epochs = _run(tmp_path, "kill")
    assert code == -9
    first, second = _train_epochs(epochs)
    assert first.ended and first.ran == 200
    # the second epoch never ended; 151 batches were drawn, and 40 validation epochs
    # claimed slots meanwhile (more than the table has): its count is still exact ...
    assert len(epochs) == 2 + 40 and L.LOADER_SLOTS < 40
    assert not second.ended and second.counted == 151 and second.ran == 151
    # ... though its last BATCH records were still held back when the process died
    in_ring = sorted(p[0] for p in second.prints)
    assert in_ring == list(range(len(in_ring))) and 8 <= len(in_ring) <= 151 - 1
    assert 151 - len(in_ring) < batch_records.HOLD


def test_held_back_records_are_written_by_the_exit(tmp_path: Path) -> None:
    code, epochs = _run(tmp_path, "exit")
    assert code == 0
    first, second = _train_epochs(epochs)
    assert [p[0] for p in sorted(first.prints)] == list(range(200))
    assert [p[0] for p in sorted(second.prints)] == list(range(151))
    times = [p[3] for p in sorted(second.prints)]
    assert times == sorted(times) and times[0] > 0  # each at the time its batch was drawn
    assert second.counted == 151 and second.ran == 151
