"""Loader identity (per loader object, not per iterating line) and the kinds of seed
collisions (data-loading draws vs training-step draws under a framework that seeds alike)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from ddpdoctor.analysis.causal import uneven
from ddpdoctor.analysis.detectors import seeds
from tests.unit.test_detectors_unit import epoch_end, epoch_start, job


def rng(batch: int, after: dict[str, str], before: dict[str, str] | None = None,
        drew: list[str] | None = None, **kw: Any) -> dict[str, Any]:
    m = {"event": "rng", "loader": 0, "epoch": 0, "batch": batch, "torch_seed": 0,
         **after, **kw}
    if before is not None:
        m["fetch_before"] = before
        m["fetch_drew"] = drew or []
    return m


def dropout_only(**kw: Any) -> list[dict[str, Any]]:
    """States equal on every rank; the step draws (t0 -> t1), the fetch draws nothing."""
    return [rng(0, {"torch": "t0"}, {"torch": "t0"}, **kw),
            rng(1, {"torch": "t1"}, {"torch": "t1"}, **kw),
            rng(3, {"torch": "t3"}, {"torch": "t2"}, **kw)]


def augment_only(**kw: Any) -> list[dict[str, Any]]:
    """States equal on every rank; each fetch draws (a -> b), the step draws nothing."""
    return [rng(0, {"torch": "b0"}, {"torch": "a0"}, ["torch"], **kw),
            rng(1, {"torch": "b1"}, {"torch": "b0"}, ["torch"], **kw),
            rng(3, {"torch": "b3"}, {"torch": "a3"}, ["torch"], **kw)]


def two_ranks(meta: list[dict[str, Any]]) -> Any:
    return job({0: {"meta": meta}, 1: {"meta": list(meta)}})


# -- seed_collision ---------------------------------------------------------------------------
def test_dropout_seeded_alike_by_the_user_is_a_warning() -> None:
    (f,) = seeds.detect(two_ranks(dropout_only()))
    assert f.severity.value == "warning" and f.ranks == (0, 1)
    assert f.evidence["step_generators"] == {"torch": [0, 1]}
    assert "data_generators" not in f.evidence and "manual_seed" in f.fix


def test_dropout_seeded_alike_by_the_trainer_is_info_with_its_own_fix() -> None:
    (f,) = seeds.detect(two_ranks(dropout_only(framework="transformers")))
    assert f.severity.value == "info" and "on purpose" in f.summary
    assert "data_seed" in f.fix and "process_index" in f.fix
    (f,) = seeds.detect(two_ranks(dropout_only(framework="lightning")))
    assert f.severity.value == "info" and "workers=True" in f.fix


def test_augmentation_drawn_alike_is_a_warning_even_under_a_framework() -> None:
    (f,) = seeds.detect(two_ranks(augment_only()))
    assert f.severity.value == "warning" and f.evidence["data_generators"] == {"torch": [0, 1]}
    assert "step_generators" not in f.evidence
    (f,) = seeds.detect(two_ranks(augment_only(framework="lightning")))
    assert f.severity.value == "warning" and "seed_everything(seed, workers=True)" in f.fix


def test_draws_from_different_states_do_not_collide() -> None:
    r0 = [rng(0, {"torch": "b0"}, {"torch": "a0"}, ["torch"]),
          rng(1, {"torch": "x1"}, {"torch": "x0"}, ["torch"])]
    r1 = [rng(0, {"torch": "c0"}, {"torch": "d0"}, ["torch"]),
          rng(1, {"torch": "y1"}, {"torch": "y0"}, ["torch"])]
    assert seeds.detect(job({0: {"meta": r0}, 1: {"meta": r1}})) == []


def worker(rank: int, state: str, seed: int = 7) -> dict[str, Any]:
    return {"event": "worker_rng", "worker": 0, "seed": seed, "consumed": ["numpy"],
            "state": {"numpy": state}}


def test_workers_reseeded_per_rank_do_not_collide_despite_one_base_seed() -> None:
    start = epoch_start(0, 4, worker_base_seed=7)
    j = job({0: {"meta": [start, worker(0, "s0")]}, 1: {"meta": [start, worker(1, "s1")]}})
    assert seeds.detect(j) == []


def test_workers_drawing_from_one_state_collide() -> None:
    j = job({0: {"meta": [worker(0, "s")]}, 1: {"meta": [worker(1, "s")]}})
    (f,) = seeds.detect(j)
    assert f.severity.value == "warning" and f.ranks == (0, 1)
    assert f.evidence["workers"]["generator"] == "numpy"


# -- uneven_batches per loader --------------------------------------------------------------
def test_a_loader_only_rank_0_iterates_is_never_uneven() -> None:
    train = [epoch_start(0, 4), epoch_end(0, 4, "a")]
    val = [{**epoch_start(0, 3), "loader": 9}, {**epoch_end(0, 3, "v"), "loader": 9}]
    j = job({0: {"meta": train + val}, 1: {"meta": train}}, outcome="hung")
    assert uneven.detect(j) == []


def test_a_prediction_alone_does_not_explain_a_hang() -> None:
    m0, m1 = [epoch_start(0, 4)], [epoch_start(0, 5)]  # neither rank ended the epoch
    (f,) = uneven.detect(job({0: {"meta": m0}, 1: {"meta": m1}}, outcome="hung"))
    assert f.severity.value == "warning" and not f.evidence["confirmed"] and f.seq is None


def test_the_loader_name_says_where_it_was_made_and_iterated() -> None:
    start = {"created": "/a/train.py:40", "site": "/x/engine.py:88"}
    assert uneven.loader_name(start, 3) == \
        "the DataLoader created at train.py:40, iterated at engine.py:88"
    assert uneven.loader_name({}, 3) == "DataLoader #3"


# -- the probes in a real process -------------------------------------------------------------
SCRIPT = textwrap.dedent("""
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    from ddpdoctor.runtime import data_probes
    data_probes.install()
    ds = TensorDataset(torch.arange(12.0).reshape(12, 1))

    def run(loader):  # one line iterates every loader (as a framework's engine does)
        return sum(1 for _ in loader)

    train = DataLoader(ds, batch_size=4, shuffle=True)
    val = DataLoader(ds, batch_size=4)
    for epoch in range(2):
        run(train)
        run(val)
        again = DataLoader(ds, batch_size=3)  # re-created each epoch at one line
        run(again)
""")


def test_loaders_iterated_from_one_line_keep_their_own_ids(tmp_path: Path) -> None:
    env = {**os.environ, "DDPDOCTOR_RUN_DIR": str(tmp_path), "RANK": "0",
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (meta,) = (tmp_path / "traces").glob("*.meta.jsonl")
    events = [json.loads(line) for line in meta.read_text().splitlines()]
    assert not [e for e in events if e["event"] == "runtime_error"]
    starts = [e for e in events if e["event"] == "loader_epoch"]
    assert len(starts) == 6
    ids = [s["loader"] for s in starts]
    assert len(set(ids[:3])) == 3 and ids[3:] == ids[:3]  # three loaders, same ids each epoch
    assert [s["epoch"] for s in starts] == [0, 0, 0, 1, 1, 1]
    assert len({s["site"] for s in starts}) == 1  # all iterated from one line
    assert all(s["created"].startswith("<string>:") for s in starts)
    ends = [e for e in events if e["event"] == "loader_end"]
    assert [e["batches"] for e in ends] == [3, 3, 4] * 2


def test_one_loader_built_on_a_line_per_rank_is_compared_across_ranks() -> None:
    def epoch(loader: int, batches: int) -> list[dict[str, Any]]:
        return [{**epoch_start(0, batches), "loader": loader, "site": "/a/train.py:50"},
                {**epoch_end(0, batches, "o"), "loader": loader}]

    j = job({0: {"meta": epoch(11, 4)}, 1: {"meta": epoch(22, 3)}})
    (f,) = uneven.detect(j)
    assert f.ranks == (1,) and f.evidence["batches"] == {"0": 4, "1": 3}
    # two loaders of rank 0 alone at one line are not merged with anything
    j = job({0: {"meta": epoch(11, 4) + epoch(33, 2)}, 1: {"meta": epoch(11, 4)}})
    assert uneven.detect(j) == []
