"""Flight recorder dumps as facts: entries in, Calls and findings out (no job launched)."""

from __future__ import annotations

import dataclasses
import json
import pickle
from pathlib import Path

import pytest

from ddpdoctor.analysis.load import flight_recorder as fr
from ddpdoctor.analysis.load import fr_dumps as dumps
from ddpdoctor.analysis.engine import analyze
from ddpdoctor.analysis.load.run_dirs import load_job
from ddpdoctor.analysis.model import Call
from ddpdoctor.errors import UserError
from ddpdoctor.report.build import build_report
from ddpdoctor.trace import fr_pickle
from tests.unit.flight_recorder_factory import entry, write_dump


def test_entries_become_calls_with_seq_from_zero_and_gloo_completion(tmp_path):
    path = write_dump(tmp_path, 0, [entry(1), entry(2, "barrier", sizes=[], retired=False)], 1)
    dump = dumps.load_dump(path)
    assert dump.rank == 0 and dump.group_ranks == {"0": [0, 1]}
    first, second = dump.calls["0"]
    assert (first.seq, first.op, first.in_shapes, first.dtypes) == (0, "all_reduce",
                                                                    ((10,),), ("float32",))
    assert not first.open and second.open and second.op == "barrier" and second.seq == 1


def test_nccl_state_and_p2p_peer(tmp_path):
    done = entry(1, backend="nccl", state="completed", time_discovered_completed_ns=5_000,
                 retired=False)
    send = entry(1, "send 0->1", backend="nccl", is_p2p=True, p2p_seq_id=1, retired=False)
    dump = dumps.load_dump(write_dump(tmp_path, 0, [done, send], 0))
    assert not dump.calls["0"][0].open and dump.calls["0"][0].t_end == 5_000
    p2p = dump.calls["0"][1]
    assert p2p.op == "send" and p2p.peer == 1 and p2p.open


def test_hung_dumps_give_the_mismatch_at_its_seq(tmp_path):
    write_dump(tmp_path, 0, [entry(1), entry(2, "barrier", sizes=[], retired=False)], 1)
    write_dump(tmp_path, 1, [entry(1), entry(2, retired=False)], 1)
    job = load_job([tmp_path])
    assert sorted(job.ranks) == [0, 1] and job.world_size == 2
    root = analyze(job)[0]
    assert root.kind == "collective_mismatch" and root.seq == 1
    assert {c["op"] for c in root.evidence["calls"].values()} == {"barrier", "all_reduce"}


def test_a_pickle_that_asks_for_a_call_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "unpickled"

    class Boom:
        def __reduce__(self):
            return (Path.touch, (marker,))

    (tmp_path / "nccl_trace_rank_0").write_bytes(pickle.dumps({"entries": [Boom()]}))
    with pytest.raises(UserError) as err:
        load_job([tmp_path])
    assert "more than plain data" in str(err.value) and "\n" not in str(err.value)
    assert err.value.exit_code == 2 and not marker.exists()


@pytest.mark.parametrize("protocol", [2, pickle.HIGHEST_PROTOCOL])
def test_torch_pickle_dumps_read_as_their_json_twins(tmp_path, protocol):
    """torch's own dumps are pickles of plain data (tuples for the group): decoded as data,
    they give the calls their JSON gives."""
    as_json = write_dump(tmp_path / "json", 0, [entry(1), entry(2, retired=False)], 1)
    data = json.loads(as_json.read_text())
    for e in data["entries"]:
        e["process_group"] = tuple(e["process_group"])
    as_pickle = tmp_path / "nccl_trace_rank_0"
    as_pickle.write_bytes(pickle.dumps(data, protocol=protocol))
    assert fr_pickle.decode(as_pickle.read_bytes(), "x") == data
    assert dumps.load_dump(as_pickle).calls == dumps.load_dump(as_json).calls


def test_broken_pickle_is_one_line_error(tmp_path):
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps({"entries": [1, 2, 3]})[:-6])
    with pytest.raises(UserError, match="broken pickle") as err:
        dumps.load_dump(path)
    assert err.value.exit_code == 2


def test_a_pickle_that_unfolds_far_beyond_its_bytes_is_refused(tmp_path):
    laughs: list = []
    for _ in range(40):
        laughs = [laughs, laughs]  # 2**40 lists from a few hundred bytes
    deep = b"\x80\x02" + b"]" * 5000 + b"a" * 4999 + b"."
    for raw in (pickle.dumps({"entries": laughs}), deep):
        path = tmp_path / "nccl_trace_rank_0"
        path.write_bytes(raw)
        with pytest.raises(UserError, match="nested too deeply or shared too widely"):
            dumps.load_dump(path)


def test_the_default_groups_name_is_put_back_for_torchs_tool():
    """torch 2.13's gloo dumps key the default group's config by "": its own fr_trace then
    fails; the repair names it as the entries do, and only when that is unambiguous."""
    dump = {"pg_config": {"": {"name": "", "desc": "", "ranks": "[0, 1]"}},
            "entries": [entry(1) | {"process_group": ("0", "default_pg")}]}
    fixed = fr_pickle.repaired(dump)
    assert fixed["pg_config"] == {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}}
    two = dict(dump, entries=dump["entries"] + [entry(1, pg="1")])
    assert fr_pickle.repaired(two) is two


def test_dumps_alone_say_the_rank_that_never_issued_not_that_it_computes(tmp_path):
    write_dump(tmp_path, 0, [entry(1), entry(2, retired=False)], 1)
    write_dump(tmp_path, 1, [entry(1)], 1)
    report = build_report([tmp_path], live=False)
    assert report["outcome"] == "hung"
    assert [r["state"] for r in report["ranks"]] == ["waiting", "unknown"]
    [root] = report["findings"]
    assert (root["kind"], root["ranks"], root["seq"]) == ("missing_collective", [1], 1)
    assert "computing" not in root["summary"] + root["detail"]
    assert "timeout" not in root["fix"] and "stack" in root["fix"]


def test_dumps_alone_tell_a_missing_dump_and_no_wait_they_cannot_time(tmp_path):
    write_dump(tmp_path, 0, [entry(1), entry(2, retired=False)], 1)  # rank 1's dump not copied
    report = build_report([tmp_path], live=False)
    [root] = report["findings"]
    assert root["ranks"] == [1] and "left no flight recorder dump" in root["summary"]
    assert "Waiting for" not in root["detail"] and "Waiting since" in root["detail"]
    assert "not joined" not in root["summary"] and "dump" in root["fix"]


def test_dumps_alone_with_nothing_pending_never_say_completed(tmp_path):
    for rank in (0, 1):
        write_dump(tmp_path, rank, [entry(1), entry(2)], 2)
    report = build_report([tmp_path], live=False)
    assert report["outcome"] == "running" and report["findings"] == []
    assert dumps.NOTHING_PENDING in report["problems"]


def test_corrupt_dump_is_one_line_error(tmp_path):
    (tmp_path / "fr-0").write_text('{"entries": [{"collective_seq_id": 1,')
    with pytest.raises(UserError) as err:
        dumps.load_dump_dir(tmp_path)
    assert "not valid JSON" in str(err.value) and "\n" not in str(err.value)


def test_dump_without_rank_in_its_name_is_refused(tmp_path):
    path = write_dump(tmp_path, 0, [entry(1)], 1, name="dump.json")
    with pytest.raises(UserError, match="rank"):
        dumps.load_dump(path)


def call(seq: int, op: str, site: str = "train.py:1", open_: bool = False) -> Call:
    return Call(rank=0, group="0", seq=seq, op=op, reduce_op="sum", in_shapes=((10,),),
                out_shapes=((10,),), dtypes=("float32",), callsite=site, t_start=10 + seq,
                t_end=0 if open_ else 11 + seq, aux=-1)


def test_align_adds_collectives_the_patches_missed_and_keeps_call_sites():
    traced = [call(0, "all_reduce", "a.py:1"), call(1, "barrier", "a.py:9", open_=True)]
    recorded = [call(0, "all_reduce", dumps.NO_CALLSITE), call(1, "all_reduce", dumps.NO_CALLSITE),
                call(2, "all_reduce", dumps.NO_CALLSITE), call(3, "barrier", dumps.NO_CALLSITE)]
    merged = fr.align(traced, recorded)
    assert [(c.seq, c.op, c.callsite) for c in merged] == [
        (0, "all_reduce", "a.py:1"), (1, "all_reduce", dumps.NO_CALLSITE),
        (2, "all_reduce", dumps.NO_CALLSITE), (3, "barrier", "a.py:9")]
    assert merged[-1].open


def test_a_functional_all_gather_is_the_recorders_allgather():
    """A DTensor's full_tensor() (a functional all_gather_into_tensor) is recorded by torch
    on gloo as its list ``allgather``: the traced call keeps its line and its seq."""
    traced = [call(0, "all_reduce", "a.py:1"), call(1, "all_gather_into_tensor", "a.py:5",
                                                    open_=True)]
    recorded = [call(0, "all_reduce", dumps.NO_CALLSITE), call(1, "all_gather", dumps.NO_CALLSITE,
                                                            open_=True)]
    merged = fr.align(traced, recorded)
    assert [(c.seq, c.op, c.callsite) for c in merged] == [
        (0, "all_reduce", "a.py:1"), (1, "all_gather_into_tensor", "a.py:5")]


def test_align_refuses_sequences_that_do_not_match():
    assert fr.align([call(0, "all_reduce")], [call(0, "broadcast")]) is None


def test_a_wrapped_recorder_gives_its_window_without_the_calls_before_it():
    """The recorder keeps the last entries only (its first is the group's seq 5): the traced
    call that ended before the window is left out, the ones inside it take its seqs."""
    ms = 1_000_000
    traced = [dataclasses.replace(call(0, "barrier", "a.py:3"), t_start=10 * ms,
                                  t_end=11 * ms),
              dataclasses.replace(call(1, "all_reduce", "a.py:7", open_=True),
                                  t_start=500 * ms)]
    recorded = [dataclasses.replace(call(i, "all_reduce", dumps.NO_CALLSITE), t_start=t * ms,
                                    t_end=0 if i == 6 else t * ms + 1)
                for i, t in ((5, 300), (6, 500))]
    merged = fr.align(traced, recorded)
    assert [(c.seq, c.callsite) for c in merged] == [(5, dumps.NO_CALLSITE), (6, "a.py:7")]


def test_an_absurd_rank_in_a_dump_name_is_refused(tmp_path):
    path = write_dump(tmp_path, 0, [entry(1)], 1, name="fr-99999999999")
    with pytest.raises(UserError, match="beyond any job"):
        dumps.load_dump(path)


def test_align_does_not_take_a_direct_call_for_the_traced_one_after_it():
    """rank 1 of a job that calls the process group directly between two all_reduces:
    the open traced all_reduce is the recorder's third entry, not its second."""
    ms = 1_000_000
    traced = [dataclasses.replace(call(0, "all_reduce", "a.py:7"), t_start=10 * ms,
                                  t_end=20 * ms),
              dataclasses.replace(call(1, "all_reduce", "a.py:11", open_=True),
                                  t_start=500 * ms)]
    recorded = [dataclasses.replace(call(i, "all_reduce", dumps.NO_CALLSITE), t_start=t * ms,
                                    t_end=0 if i == 2 else t * ms + 1)
                for i, t in ((0, 10), (1, 300), (2, 500))]
    merged = fr.align(traced, recorded)
    assert [(c.seq, c.callsite) for c in merged] == [
        (0, "a.py:7"), (1, dumps.NO_CALLSITE), (2, "a.py:11")]


def _two_traced_ranks() -> dict:
    from tests.unit.factory import rank, rec

    return {r: rank(r, [rec(0, t=1.0), rec(1, t=2.0)]) for r in (0, 1)}


def _dumps(run_dir: Path, second_rank_aligns: bool) -> None:
    """Both ranks' recorders saw a broadcast the patches missed, between the two traced
    all_reduces; rank 1's recorder has no entry for its second traced all_reduce unless
    ``second_rank_aligns``."""
    from ddpdoctor.trace import fr_files
    from tests.unit.factory import NS, T0

    def at(seq: int, op: str, t: float) -> dict:
        return entry(seq, op, time_created_ns=T0 + int(t * NS))

    full = [at(1, "all_reduce", 1.0005), at(2, "broadcast", 1.5), at(3, "all_reduce", 2.0005)]
    for r in (0, 1):
        entries = full if r == 0 or second_rank_aligns else full[:2]
        write_dump(fr_files.dump_dir(run_dir), r, entries, 3, name=f"fr-rank-{r}.json")


def test_dumps_join_every_rank_or_none(tmp_path):
    """A rank joined with its dump and another not would number one call differently
    (a false mismatch blaming a rank that only waited): either every rank joins or none."""
    ranks = _two_traced_ranks()
    _dumps(tmp_path, second_rank_aligns=False)
    notes = fr.join_run_dir_dumps(tmp_path, ranks)
    assert [[(c.seq, c.op) for c in ranks[r].calls["0"]] for r in (0, 1)] == \
        [[(0, "all_reduce"), (1, "all_reduce")]] * 2
    assert any("every rank's trace alone is used" in n for n in notes), notes

    ranks = _two_traced_ranks()
    _dumps(tmp_path / "both", second_rank_aligns=True)
    notes = fr.join_run_dir_dumps(tmp_path / "both", ranks)
    assert [[(c.seq, c.op) for c in ranks[r].calls["0"]] for r in (0, 1)] == \
        [[(0, "all_reduce"), (1, "broadcast"), (2, "all_reduce")]] * 2
    assert sum("seen only by torch's flight recorder" in n for n in notes) == 2
