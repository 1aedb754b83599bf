"""The data probes' batch counts in a real process: the header's loader-progress table
holds every epoch's exact count once the rank waits, exits or drops the iterator, though
past an epoch's first batches no probe runs (a thread samples the counts); the BATCH
records are the epochs' first batches."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from ddpdoctor.analysis.align.epochs import epochs_of
from ddpdoctor.analysis.load.run_dirs import rank_run
from ddpdoctor.runtime import batch_counts, data_probes
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.reader import read_trace

SCRIPT = textwrap.dedent("""
    import os, signal, sys, time
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
                if sys.argv[1] == "kill":  # a rank that waits (say, in a collective), killed
                    time.sleep(float(sys.argv[2]))
                    os.kill(os.getpid(), signal.SIGKILL)
                break
""")


def _rank(tmp_path: Path, script: str, *args: str) -> subprocess.CompletedProcess:
    """``script`` run as rank 0 of a run dir in tmp_path (the runtime active)."""
    env = {**os.environ, "DDPDOCTOR_RUN_DIR": str(tmp_path), "RANK": "0",
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.run([sys.executable, "-c", script, *args], env=env,
                          capture_output=True, text=True, timeout=300)


def _run(tmp_path: Path, how: str, wait: float = 0.0) -> tuple[int, dict]:
    done = _rank(tmp_path, SCRIPT, how, str(wait))
    (ring,) = (tmp_path / "traces").glob("*.ring")
    trace = read_trace(ring)
    assert not trace.meta_events("runtime_error")
    epochs = epochs_of(rank_run(trace))
    return done.returncode, epochs


def _train_epochs(epochs: dict) -> list:
    """The training loader's epochs (200 batches of 2), told from the 4-batch validation."""
    train = [k for k, f in epochs.items() if f.ran > 4]
    return [epochs[k] for k in sorted(train)]


def test_a_killed_rank_that_waited_leaves_its_exact_batch_count(tmp_path: Path) -> None:
    code, epochs = _run(tmp_path, "kill", wait=3 * batch_counts.SAMPLE_EVERY_S)
    assert code == -9
    first, second = _train_epochs(epochs)
    assert first.ended and first.ran == 200
    # the second epoch never ended; 151 batches were drawn, and 40 validation epochs
    # claimed slots meanwhile (more than the table has): its count is still exact ...
    assert len(epochs) == 2 + 40 and L.LOADER_SLOTS < 40
    assert not second.ended and second.counted == 151 and second.ran == 151
    # ... though only its first batches were probed (and recorded) one by one
    assert sorted(p[0] for p in second.prints) == list(range(data_probes.FIRST_FPS))


def test_counts_are_exact_at_the_exit_and_records_are_the_first_batches(
        tmp_path: Path) -> None:
    code, epochs = _run(tmp_path, "exit")
    assert code == 0
    first, second = _train_epochs(epochs)
    first_batches = list(range(data_probes.FIRST_FPS))
    assert [p[0] for p in sorted(first.prints)] == first_batches
    assert [p[0] for p in sorted(second.prints)] == first_batches
    times = [p[3] for p in sorted(second.prints)]
    assert times == sorted(times) and times[0] > 0  # each at the time its batch was drawn
    assert first.ended and first.ran == 200 and first.end["batches"] == 200
    # the user broke out after 151 batches: the iterator's last count, as it was freed
    assert not second.ended and second.counted == 151 and second.ran == 151


KINDS = textwrap.dedent("""
    import sys
    import torch
    from torch.utils.data import DataLoader, IterableDataset, TensorDataset
    from ddpdoctor.runtime import data_probes
    data_probes.install()
    if sys.argv[1] == "broken":  # every fingerprint fails: the probe goes off, loops run on
        data_probes.indices_fingerprint = data_probes.tensor_fingerprint = None

    class Stream(IterableDataset):
        def __init__(self, n):
            self.n = n
        def __iter__(self):
            return iter(torch.arange(float(self.n)).reshape(-1, 1))

    def run(loader, epochs=1):
        return [sum(1 for _ in loader) for _ in range(epochs)]

    ds = TensorDataset(torch.arange(100.0).reshape(100, 1))
    got = [
        run(DataLoader(ds, batch_size=4, shuffle=True)),
        run(DataLoader(ds, batch_size=4, num_workers=2)),
        run(DataLoader(ds, batch_size=4, num_workers=2, persistent_workers=True), 2),
        run(DataLoader(Stream(50), batch_size=4)),
        run(DataLoader(Stream(50), batch_size=4, drop_last=True)),
        run(DataLoader(Stream(30), batch_size=None)),
        run(DataLoader(Stream(50), batch_size=4, num_workers=2)),
        run(DataLoader(ds, batch_size=40, num_workers=2), 2),  # drawn before the epoch began
    ]
    kept = iter(DataLoader(Stream(60), batch_size=4))  # its epoch ends at the exit
    print(got, sum(1 for _ in kept))
""")


def _kinds(tmp_path: Path, how: str) -> tuple[str, list, list]:
    done = _rank(tmp_path, KINDS, how)
    assert done.returncode == 0, done.stderr[-2000:]
    (ring,) = (tmp_path / "traces").glob("*.ring")
    trace = read_trace(ring)
    epochs = sorted(epochs_of(rank_run(trace)).values(), key=lambda f: f.start["t"])
    return done.stdout, epochs, trace.meta_events("runtime_error")


def test_every_kind_of_iterator_ends_its_epochs_with_exact_counts(tmp_path: Path) -> None:
    """One process or workers (persistent too), map-style or iterable (batched, dropping
    the last, unbatched), run out or kept open to the exit: each epoch ends with the batch
    count the loop saw, though the probes left the iterator after its first batches."""
    out, epochs, errors = _kinds(tmp_path, "ok")
    assert out.split() == ["[[25],", "[25],", "[25,", "25],", "[13],", "[12],", "[30],",
                           "[26],", "[3,", "3]]", "15"]
    assert errors == []
    assert [(f.ended, f.ran, f.counted) for f in epochs] == [
        (True, n, n) for n in (25, 25, 25, 25, 13, 12, 30, 26, 3, 3, 15)]
    for f in epochs:
        assert sorted(p[0] for p in f.prints) == list(range(min(f.ran, data_probes.FIRST_FPS)))


def test_a_failing_probe_goes_off_and_the_loops_run_on(tmp_path: Path) -> None:
    out, epochs, errors = _kinds(tmp_path, "broken")
    assert out.split() == ["[[25],", "[25],", "[25,", "25],", "[13],", "[12],", "[30],",
                           "[26],", "[3,", "3]]", "15"]  # what the user's loops saw: unchanged
    assert errors and "probe disabled" in errors[0]["where"]


GARBAGE = textwrap.dedent("""
    import gc
    import torch
    from torch.utils.data import DataLoader, IterableDataset, TensorDataset
    from ddpdoctor.runtime import data_probes
    data_probes.install()

    class Stream(IterableDataset):
        def __iter__(self):
            return iter(torch.zeros(200, 1))

    loaders = [DataLoader(TensorDataset(torch.zeros(200, 1)), batch_size=4, shuffle=True),
               DataLoader(Stream(), batch_size=4)]
    gc.collect()
    gc.disable()
    for loader in loaders:
        for stop in (3, 20, None):  # left early (hooks still on, or off), or run out
            for i, _ in enumerate(loader):
                if i == stop:
                    break
    print(gc.collect())
""")


def test_the_probes_leave_no_garbage_cycles(tmp_path: Path) -> None:
    """An iterator the loop drops is freed at once, as without ddpdoctor (a DataLoader's
    workers stop when their iterator goes): nothing for the cycle collector."""
    done = _rank(tmp_path, GARBAGE)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["0"]
