"""The control-flow recording inside a rank (runtime/control_flow.py, Python 3.12+): the
user's branches counted per segment and written as PATH records, the values a condition
read, hot loops silenced, ddpdoctor's own code never instrumented, a forked child silent.
Real sys.monitoring, a real Recorder on a scratch run dir; read back with the reader.
On Python 3.10 and 3.11 there is nothing to record: the CI's 3.13 smoke runs these."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from ddpdoctor.runtime import control_flow
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.reader import read_trace
from ddpdoctor.analysis.align.paths import ways_in
from ddpdoctor.analysis.explain.recorded import entered_way
from ddpdoctor.analysis.load.flow import rank_flow

pytestmark = pytest.mark.skipif(not control_flow.SUPPORTED,
                                reason="sys.monitoring: Python 3.12 and newer")

USER_CODE = """\
import os


def work(state_path, items):
    if os.path.exists(state_path):
        start = 6
    else:
        start = 0
    total = 0
    for k in range(start, 10):
        total += k
    for x in items:
        if x < 0:
            continue
    return total
"""


@pytest.fixture
def flow(tmp_path, monkeypatch):
    """A Recorder on a scratch run dir and the control-flow recording started on it."""
    from ddpdoctor.runtime import recorder as R

    monkeypatch.setenv("DDPDOCTOR_RUN_DIR", str(tmp_path / "run"))
    monkeypatch.setattr(R, "_recorder", None)
    monkeypatch.setattr(control_flow, "_flow", None)
    rec = R.active()
    found = control_flow.start(rec)
    assert found is not None
    yield found
    found.stop()
    rec.writer.close()


def _user_module(tmp_path: Path) -> dict:
    path = tmp_path / "user_train.py"
    path.write_text(USER_CODE)
    namespace: dict = {"__name__": "user_train"}
    exec(compile(USER_CODE, str(path), "exec"), namespace)
    return namespace


def _read(flow) -> object:
    trace = read_trace(flow.rec.writer.ring_path)
    return rank_flow(trace.records, trace.meta, trace.group_names())


def test_a_segment_holds_each_branch_of_the_users_code_and_what_it_read(flow, tmp_path):
    ns = _user_module(tmp_path)
    flow.instrument(ns["work"].__code__)
    ns["work"](str(tmp_path / "missing"), [1, -1, 2])
    flow.close(0, 0)
    recorded = _read(flow)
    sites = {s.line: s for s in recorded.sites.values()}
    assert {5, 10, 12, 13} <= set(sites)
    seg = recorded.segments[0]
    assert seg.opening == ("-1", -1) and seg.closing == ("0", 0)  # before any collective
    by_line = {w.site.line: w.entry for w in ways_in(recorded, 0, seg).values()}
    assert (by_line[5].fell, by_line[5].jumped) == (0, 1)  # the file is missing
    assert (by_line[10].fell, by_line[10].jumped) == (10, 1)  # range(0, 10), then out
    skip = by_line[13]  # `if x < 0: continue`: which way enters the body is the compiler's
    entered = (skip.fell, skip.jumped)[entered_way(recorded.sites[skip.site])]
    assert entered == 1 and skip.fell + skip.jumped == 3  # one negative item skipped
    read = recorded.values(sites[5].number, 1)["state_path"]
    assert read.endswith("/missing'") and len(read) <= 60  # bounded, the file name kept
    assert recorded.values(sites[10].number, 0)["start"] == "0"


def test_a_hot_loop_is_counted_up_to_its_limit_and_silenced_then_counted_again(flow, tmp_path):
    ns = _user_module(tmp_path)
    flow.instrument(ns["work"].__code__)
    ns["work"]("/nonexistent", [1] * 100)
    flow.close(0, 0)
    ns["work"]("/nonexistent", [1] * 3)  # re-enabled at the close? (at most every 100 ms)
    flow.close(0, 1)
    recorded = _read(flow)
    first = {w.site.line: w.entry
             for w in ways_in(recorded, 0, recorded.segments[0]).values()}
    assert first[13].saturated and first[13].fell + first[13].jumped <= 2 * 16
    assert len(recorded.segments) == 2


def test_ddpdoctors_own_code_and_library_code_are_never_instrumented(flow):
    import json

    flow.instrument(control_flow.FlowRecorder.close.__code__)
    flow.instrument(json.dumps.__code__)
    assert id(control_flow.FlowRecorder.close.__code__) not in flow.codes
    assert id(json.dumps.__code__) not in flow.codes
    assert not flow.users(os.path.join(os.path.dirname(control_flow.__file__), "..",
                                       "runtime", "recorder.py"))


def test_a_bug_in_the_callback_turns_the_recording_off_and_the_code_runs_on(flow, tmp_path):
    ns = _user_module(tmp_path)
    flow.instrument(ns["work"].__code__)
    flow.keys = None  # a broken recorder: its first lookup raises
    assert ns["work"]("/nonexistent", [1, 2]) == 45
    assert not flow.on
    meta = (tmp_path / "run" / "traces").glob("*.meta.jsonl")
    assert any("control flow" in p.read_text() for p in meta)


def test_the_segments_record_kind_is_what_the_reader_knows():
    assert int(L.RecordKind.PATH) == 6
    assert sys.version_info >= (3, 12)


def test_the_switch_turns_the_recording_off(tmp_path, monkeypatch):
    """DDPDOCTOR_FLOW=0: nothing instrumented, said once in the meta log."""
    from ddpdoctor.runtime import control_flow

    said = []

    class Rec:
        def meta(self, event, **fields):
            said.append((event, fields))

    monkeypatch.setenv(control_flow.ENV_SWITCH, "0")
    monkeypatch.setattr(control_flow, "_flow", None)
    monkeypatch.setattr(control_flow, "_said", [])
    assert control_flow.start(Rec()) is None
    assert control_flow.start(Rec()) is None
    assert [e for e, _ in said] == ["flow_off"] and "DDPDOCTOR_FLOW" in said[0][1]["why"]
