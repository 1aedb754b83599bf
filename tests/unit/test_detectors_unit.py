"""The data detectors' rules on hand-built traces: one factory, one case a test."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ddpdoctor.analysis.causal import uneven
from ddpdoctor.analysis.detectors import duplicate, seeds, shuffle, straggler
from ddpdoctor.analysis.load.run_dirs import rank_run
from ddpdoctor.analysis.model import NS, JobView
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.reader import LoaderCount, RankTrace, TraceHeader
from ddpdoctor.trace.record import CallRecord, placed

MS = NS // 1000


def header(rank: int, step: int = 0) -> TraceHeader:
    return TraceHeader(pid=100 + rank, rank=rank, world_size=2, local_rank=rank,
                       state=L.RankState.EXITED, exit_code=0, step=step, epoch=0, count=0,
                       heartbeat_ns=0, last_seq=0, started_ns=1, host="h", run_id="r",
                       capacity=1024)


def record(kind: L.RecordKind, seq: int, t: int, op: str = "all_reduce", aux: int = 0,
           callsite: str = "train.py:1", t_end: int | None = None) -> CallRecord:
    return CallRecord(kind=kind, op=op, reduce_op="sum", seq=seq, t_start=t,
                      t_end=t + MS if t_end is None else t_end, numel=4, aux=aux,
                      in_shapes=((4,),), dtypes=("float32",), callsite=callsite)


def batch(i: int, epoch: int, idx: str, content: str, t: int = 0) -> CallRecord:
    return record(L.RecordKind.BATCH, i, t, op="batch", aux=epoch,
                  callsite=f"0:{idx}:{content}")


def job(ranks: dict[int, dict[str, Any]], outcome: str = "completed") -> JobView:
    """ranks: {rank: {"meta": [...], "records": [...], "step": n, "loaders": [LoaderCount]}}"""
    runs = {}
    for rank, spec in ranks.items():
        meta = [{"event": "group", "index": 0, "name": "0", "ranks": sorted(ranks)},
                *spec.get("meta", [])]
        head = replace(header(rank, spec.get("step", 0)), loaders=tuple(spec.get("loaders", ())))
        trace = RankTrace(Path(f"/nonexistent/pid-{rank}.ring"), head,
                          placed(spec.get("records", []), rank, {0: "0"}), meta)
        runs[rank] = rank_run(trace)
    return JobView([Path("/nonexistent")], runs, len(runs), 10**19, 60.0, False,
                   outcome=outcome)


def epoch_start(epoch: int, length: int | None, shuffle: bool | None = True, **kw: Any) -> dict:
    return {"event": "loader_epoch", "loader": 0, "epoch": epoch, "length": length,
            "shuffle": shuffle, "steps": 0, "t": 1000 + epoch, **kw}


def epoch_end(epoch: int, batches: int, order: str, content: str = "0", steps: int = 1) -> dict:
    return {"event": "loader_end", "loader": 0, "epoch": epoch, "batches": batches,
            "order": order, "content": content, "steps": steps}


def rng(batch_index: int, torch: str, python: str = "p") -> dict:
    return {"event": "rng", "loader": 0, "epoch": 0, "batch": batch_index, "torch": torch,
            "python": python, "torch_seed": 0}


# -- seed_collision ------------------------------------------------------------------------
def test_equal_rng_that_advances_during_training_collides() -> None:
    meta = [rng(0, "a"), rng(1, "b"), rng(3, "c")]
    found = seeds.detect(job({0: {"meta": meta}, 1: {"meta": meta}}))
    assert [f.kind for f in found] == ["seed_collision"]
    assert found[0].evidence["generators"] == {"torch": [0, 1]}


def test_equal_rng_never_drawn_during_training_is_fine() -> None:
    meta = [rng(0, "a"), rng(1, "a"), rng(3, "a")]
    assert seeds.detect(job({0: {"meta": meta}, 1: {"meta": meta}})) == []


def test_rng_seeded_per_rank_is_fine() -> None:
    m0 = [rng(0, "a", "p0"), rng(3, "b", "q0")]
    m1 = [rng(0, "x", "p1"), rng(3, "y", "q1")]
    assert seeds.detect(job({0: {"meta": m0}, 1: {"meta": m1}})) == []


# -- stale_shuffle ---------------------------------------------------------------------------
def test_a_repeated_order_of_a_shuffling_loader_is_stale() -> None:
    meta = [epoch_start(0, 3, sampler_epoch=0), epoch_end(0, 3, "aa"),
            epoch_start(1, 3, sampler_epoch=0), epoch_end(1, 3, "aa")]
    found = shuffle.detect(job({0: {"meta": meta}, 1: {"meta": meta}}))
    assert found and found[0].ranks == (0, 1) and "never called" in found[0].summary


def test_a_sequential_loader_repeats_by_design() -> None:
    meta = [epoch_start(0, 3, shuffle=False), epoch_end(0, 3, "aa"),
            epoch_start(1, 3, shuffle=False), epoch_end(1, 3, "aa")]
    assert shuffle.detect(job({0: {"meta": meta}, 1: {"meta": meta}})) == []


# -- duplicate_data ----------------------------------------------------------------------------
def test_same_contents_on_two_ranks_is_duplicate_data() -> None:
    recs = [batch(i, 0, f"{i}", f"c{i}") for i in range(4)]
    spec = {"meta": [epoch_start(0, 4)], "records": recs, "step": 4}
    found = duplicate.detect(job({0: spec, 1: dict(spec)}))
    assert found and found[0].ranks == (0, 1)


def test_same_indices_into_different_shards_are_not_duplicates() -> None:
    r0 = [batch(i, 0, f"{i}", f"a{i}") for i in range(4)]
    r1 = [batch(i, 0, f"{i}", f"b{i}") for i in range(4)]
    m = [epoch_start(0, 4)]
    assert duplicate.detect(job({0: {"meta": m, "records": r0, "step": 4},
                                 1: {"meta": m, "records": r1, "step": 4}})) == []


def test_an_evaluation_loader_without_steps_is_not_checked() -> None:
    recs = [batch(i, 0, f"{i}", f"c{i}") for i in range(4)]
    spec = {"meta": [epoch_start(0, 4)], "records": recs, "step": 0}
    assert duplicate.detect(job({0: spec, 1: dict(spec)})) == []


# -- uneven_batches ------------------------------------------------------------------------
def test_prediction_needs_every_rank_and_a_length() -> None:
    starts = {0: {(0, 0): epoch_start(0, 4)}, 1: {(0, 0): epoch_start(0, None)}}
    assert uneven.predict(starts, 2) is None
    assert uneven.predict({0: starts[0]}, 2) is None
    starts[1] = {(0, 0): epoch_start(0, 5)}
    f = uneven.predict(starts, 2)
    assert f is not None and f.ranks == (0,) and f.evidence["predicted"] == {"0": 4, "1": 5}


def test_uneven_counts_in_a_completed_job_are_info() -> None:
    m0 = [epoch_start(0, None), epoch_end(0, 3, "a")]
    m1 = [epoch_start(0, None), epoch_end(0, 4, "b")]
    (f,) = uneven.detect(job({0: {"meta": m0}, 1: {"meta": m1}}))
    assert f.severity.value == "info" and f.ranks == (0,) and f.evidence["confirmed"]


def _failed_after_uneven_epoch(call_at: int) -> list:
    """Rank 0 ran 3 batches, rank 1 ran 4 (epoch from t=1000 to t=5000), then the job failed;
    rank 1 made one collective at ``call_at``."""
    m0 = [epoch_start(0, None), {**epoch_end(0, 3, "a"), "t": 5000}]
    m1 = [epoch_start(0, None), {**epoch_end(0, 4, "b"), "t": 5000}]
    calls = [record(L.RecordKind.COLLECTIVE, 0, call_at)]
    return uneven.detect(job({0: {"meta": m0, "records": calls},
                              1: {"meta": m1, "records": calls}}, outcome="failed"))


def test_uneven_epoch_whose_batches_issue_collectives_explains_a_failure() -> None:
    (f,) = _failed_after_uneven_epoch(call_at=3000)
    assert f.severity.value == "error" and f.ranks == (0,)


def test_uneven_epoch_without_collectives_does_not_explain_a_failure_after_it() -> None:
    """A validation loop that only runs forward: what fails after it is not its doing."""
    (f,) = _failed_after_uneven_epoch(call_at=9000)
    assert f.severity.value == "warning"


def test_even_epochs_are_quiet() -> None:
    m = [epoch_start(0, 4), epoch_end(0, 4, "a")]
    assert uneven.detect(job({0: {"meta": m}, 1: {"meta": m}})) == []


def test_the_header_count_outruns_held_back_batch_records() -> None:
    # rank 0 ran out after 100 batches; rank 1 drew 101 (its header says so), but only
    # 72 of its BATCH records reached the ring before it hung (the rest were held back)
    m0 = [epoch_start(0, None), epoch_end(0, 100, "a")]
    m1 = [epoch_start(0, None)]
    held_back = {0: {"meta": m0, "records": [batch(i, 0, "-", "-") for i in range(100)]},
                 1: {"meta": m1, "records": [batch(i, 0, "-", "-") for i in range(72)]}}
    counted = {**held_back, 1: {**held_back[1], "loaders": [LoaderCount(0, 0, 101, 5)]}}
    (f,) = uneven.detect(job(counted, outcome="hung"))
    assert f.ranks == (0,) and f.evidence["batches"] == {"0": 100, "1": 101}
    # the records alone do not show that rank 1 went past rank 0's end: no finding
    assert uneven.detect(job(held_back, outcome="hung")) == []


def test_predict_uneven_reads_a_live_run_dir(tmp_path: Path) -> None:
    import json

    traces = tmp_path / "traces"
    traces.mkdir()
    for rank, length in ((0, 7), (1, 6)):
        lines = [{"event": "init", "rank": rank, "world_size": 2},
                 {**epoch_start(0, length), "t": 5}]
        (traces / f"pid-{rank}.meta.jsonl").write_text(
            "".join(json.dumps(x) + "\n" for x in lines))
    f = uneven.predict_uneven(tmp_path)
    assert f is not None and f.ranks == (1,) and f.evidence["predicted_at_ns"] == 5


# -- straggler ---------------------------------------------------------------------------------
def _collectives(lag_ms: int, n: int = 20, step_ms: int = 100) -> dict[int, dict[str, Any]]:
    def recs(offset: int) -> list[CallRecord]:
        return [record(L.RecordKind.COLLECTIVE, s, s * step_ms * MS + offset * MS)
                for s in range(n)]
    return {0: {"records": recs(0), "step": n}, 1: {"records": recs(lag_ms), "step": n}}


def test_a_rank_late_by_most_of_a_step_is_a_straggler() -> None:
    (f,) = straggler.detect(job(_collectives(lag_ms=60)))
    assert f.ranks == (1,) and f.kind == "straggler"
    assert abs(f.evidence["median_lag_s"] - 0.06) < 1e-6


def test_small_lags_are_not_stragglers() -> None:
    assert straggler.detect(job(_collectives(lag_ms=5))) == []
    assert straggler.detect(job(_collectives(lag_ms=60, step_ms=1000))) == []
