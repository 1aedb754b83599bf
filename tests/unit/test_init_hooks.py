"""Runtime facts before training: which process is a rank, the heartbeat, open MARK records."""

from __future__ import annotations

import os

import pytest

from ddpdoctor.runtime import init_hooks
from ddpdoctor.runtime import recorder as R
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.reader import read_trace


@pytest.fixture
def fresh_recorder(tmp_path, monkeypatch):
    monkeypatch.setenv(R.ENV_RUN_DIR, str(tmp_path))
    monkeypatch.setenv(init_hooks.ENV_RANK_PID, "")  # restored after the test
    monkeypatch.delenv(init_hooks.ENV_RANK_PID)
    monkeypatch.setattr(R, "_recorder", None)
    monkeypatch.setattr(R, "_disabled", False)
    yield tmp_path
    rec = R.existing()
    if rec is not None:
        rec.writer.close()


def only_trace(run_dir):
    [path] = (run_dir / "traces").glob("pid-*.ring")
    return read_trace(path)


def test_a_rank_from_the_environment_gets_a_starting_trace(fresh_recorder, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    init_hooks.on_process_start()
    header = only_trace(fresh_recorder).header
    assert (header.rank, header.world_size, header.local_rank) == (3, 4, 1)
    assert header.state == L.RankState.STARTING
    assert os.environ[init_hooks.ENV_RANK_PID] == str(os.getpid())


def test_a_child_of_a_rank_is_not_a_rank(fresh_recorder, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv(init_hooks.ENV_RANK_PID, str(os.getppid()))  # our parent was a rank
    init_hooks.on_process_start()
    assert R.existing() is None
    assert not (fresh_recorder / "traces").exists()


def test_a_stale_marker_from_another_process_tree_is_ignored(fresh_recorder, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv(init_hooks.ENV_RANK_PID, "999999999")
    init_hooks.on_process_start()
    assert only_trace(fresh_recorder).header.rank == 1


def test_no_rank_in_the_environment_no_trace(fresh_recorder, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    init_hooks.on_process_start()
    assert R.existing() is None


def test_spawn_child_is_named_by_its_index_until_init(fresh_recorder, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("NNODES", raising=False)
    init_hooks.on_spawn_child(2)
    header = only_trace(fresh_recorder).header
    assert (header.rank, header.local_rank) == (2, 2)
    assert header.state == L.RankState.STARTING


def test_open_mark_stays_open_until_closed(fresh_recorder):
    rec, handle = init_hooks._open_mark(init_hooks._OP_INIT, 0, 0)
    assert rec is not None and handle >= 0
    [open_rec] = only_trace(fresh_recorder).records
    assert (open_rec.kind, open_rec.op, open_rec.t_end) == (L.RecordKind.MARK, "init", 0)
    assert open_rec.callsite  # a call site, not empty
    init_hooks._close_mark(rec, handle, failed=True)
    [closed] = only_trace(fresh_recorder).records
    assert closed.t_end >= closed.t_start and closed.flags & L.RecordFlag.FAILED


def test_heartbeat_advances_on_records_at_most_every_half_second(fresh_recorder, monkeypatch):
    rec = R.active()
    assert rec is not None
    start = only_trace(fresh_recorder).header.heartbeat_ns
    clock = [start + 10 * R.HEARTBEAT_EVERY_NS]
    monkeypatch.setattr(R, "_time_ns", lambda: clock[0])
    rec.mark("step")
    first = only_trace(fresh_recorder).header.heartbeat_ns
    assert first == clock[0]
    clock[0] += R.HEARTBEAT_EVERY_NS // 2
    rec.mark("step")
    assert only_trace(fresh_recorder).header.heartbeat_ns == first  # not yet due
    clock[0] += R.HEARTBEAT_EVERY_NS
    rec.mark("step")
    assert only_trace(fresh_recorder).header.heartbeat_ns == clock[0]


def test_init_arguments_name_the_rank_before_the_rendezvous(fresh_recorder, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    seen = {}

    def init_process_group(backend=None, **kwargs):  # stands in for torch's, which blocks
        header = only_trace(fresh_recorder).header
        [mark] = only_trace(fresh_recorder).records
        seen.update(rank=header.rank, world=header.world_size, open=mark.t_end == 0)
        raise RuntimeError("rendezvous timed out")

    wrapped = init_hooks._wrap_init(init_process_group)
    with pytest.raises(RuntimeError, match="rendezvous"):
        wrapped("gloo", rank=2, world_size=3)
    assert seen == {"rank": 2, "world": 3, "open": True}
    [mark] = only_trace(fresh_recorder).records
    assert mark.op == "init" and mark.t_end > 0 and mark.flags & L.RecordFlag.FAILED


@pytest.mark.parametrize("value,said", [("", True), ("abc", True), (" ", True),
                                        ("2000", False), (" 7", False), ("-1", False),
                                        ("5x", False), (None, False)])
def test_a_flight_recorder_size_torch_cannot_parse_is_said(monkeypatch, capsys, value,
                                                          said) -> None:
    """torch 2.13's gloo hangs or aborts in init_process_group when TORCH_FR_BUFFER_SIZE
    does not start with an integer (std::stoi throws); "5x" and " 7" parse."""
    from ddpdoctor.runtime import fr_dump, notices
    from ddpdoctor.trace import fr_files

    monkeypatch.setattr(notices, "_said", set())
    monkeypatch.setenv("RANK", "0")
    if value is None:
        monkeypatch.delenv(fr_files.BUFFER_ENVS[0], raising=False)
    else:
        monkeypatch.setenv(fr_files.BUFFER_ENVS[0], value)
    fr_dump.check_buffer_env()
    err = capsys.readouterr().err
    assert ("is not an integer" in err) is said, err
    if said:
        assert f"TORCH_FR_BUFFER_SIZE={value!r}" in err
        monkeypatch.setenv("RANK", "1")
        monkeypatch.setattr(notices, "_said", set())
        fr_dump.check_buffer_env()
        assert capsys.readouterr().err == ""  # one rank says it on the console


@pytest.mark.parametrize("rank,prints", [(0, True), (1, False), (-1, True)])
def test_notice_before_init_prints_on_the_rank_init_names(monkeypatch, capsys, rank: int,
                                                           prints: bool) -> None:
    """mp.spawn children have no RANK variable: before the rendezvous, the rank their
    init_process_group call names (which the recorder learned) picks the console rank."""
    from types import SimpleNamespace

    from ddpdoctor.runtime import notices, recorder

    monkeypatch.setattr(notices, "_said", set())
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setattr(recorder, "_recorder", SimpleNamespace(rank=rank, enabled=False))
    notices.notice("a notice before init")
    assert ("ddpdoctor: notice: a notice before init" in capsys.readouterr().err) is prints


def test_the_older_flight_recorder_variable_is_checked_too(monkeypatch, capsys) -> None:
    """torch reads TORCH_NCCL_TRACE_BUFFER_SIZE as well: 'abc' there hangs gloo's init too."""
    from ddpdoctor.runtime import fr_dump, notices
    from ddpdoctor.trace import fr_files

    monkeypatch.setattr(notices, "_said", set())
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv(fr_files.BUFFER_ENVS[0], raising=False)
    monkeypatch.setenv(fr_files.BUFFER_ENVS[1], "abc")
    fr_dump.check_buffer_env()
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE='abc' is not an integer" in capsys.readouterr().err
