"""Every reader of untrusted input under generated input (hypothesis): traces, meta logs,
flight recorder dumps, report.json, run-dir files, the nodes' frames.  Each refuses what it
cannot read with its own error (one line), never another exception, and hands on no text a
terminal would act on.  The same readers run under a coverage-guided fuzzer in bench/fuzz/."""

from __future__ import annotations

import io
import json
import re
import struct
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddpdoctor.analysis.load.flow import rank_flow
from ddpdoctor.analysis.load.fr_dumps import dump_of, rank_runs
from ddpdoctor.errors import UserError
from ddpdoctor.report.console import print_summary
from ddpdoctor.report.load import validate
from ddpdoctor.rundir.bounded import MAX_DEPTH, BadInput, load_json
from ddpdoctor.supervisor.node_auth import (LeaderHandshake, NodeHandshake, Refused, Session,
                                            body_of, channel_key, parse_body)
from ddpdoctor.supervisor.node_messages import NodeReport
from ddpdoctor.terminal_text import SafeConsole, safe, safe_lines, safe_value
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.reader import TraceError, parse_meta, trace_of
from ddpdoctor.trace.sync import apply_delta
from ddpdoctor.trace.world import RANKS_PER_TRACE
from ddpdoctor.tui.model import ReportView

SETTINGS = settings(max_examples=80, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])
ACTS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
                  "\u061c\u200e\u200f\ud800-\udfff]")
JSON = st.recursive(st.none() | st.booleans() | st.integers() |
                    st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=30),
                    lambda kids: st.lists(kids, max_size=4) |
                    st.dictionaries(st.text(max_size=10), kids, max_size=4), max_leaves=30)


def _texts(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for k, v in value.items() for t in _texts(k) + _texts(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _texts(v)]
    return []


@SETTINGS
@given(st.text())
def test_safe_text_leaves_nothing_a_terminal_acts_on(text):
    assert not ACTS.search(safe(text)) and "\n" not in safe(text)
    assert not ACTS.search(safe_lines(text))
    assert safe(safe(text)) == safe(text)  # once escaped, stays as it is


@SETTINGS
@given(JSON)
def test_safe_value_cleans_every_string(value):
    assert not any(ACTS.search(t) or "\n" in t for t in _texts(safe_value(value)))


def _ring_header(capacity: int, count: int, rank: int, world: int, host: bytes) -> bytes:
    return L.HEADER.pack(L.MAGIC, L.VERSION, L.RECORD_SIZE, capacity, 1, rank, world, 0,
                         int(L.RankState.COMPUTING), -1 << 31, 0, 0, count, 1, -1, 1,
                         host[:64], b"run")


@SETTINGS
@given(capacity=st.integers(0, (1 << 24) + 5), count=st.integers(-5, 1 << 62),
       rank=st.integers(-(1 << 31), (1 << 31) - 1), world=st.integers(-(1 << 31), (1 << 31) - 1),
       host=st.binary(max_size=64), tail=st.binary(max_size=3 * L.RECORD_SIZE),
       meta=st.binary(max_size=400))
def test_a_trace_that_lies_is_read_quickly_or_refused(capacity, count, rank, world, host, tail,
                                                       meta):
    """Any header (a ring of 16M slots in a file of a few, a count of 2**62, a world of a
    billion), any records, any meta log: refused as a TraceError, or read in bounded time
    with its text made safe."""
    buf = _ring_header(capacity, count, rank, world, host).ljust(L.HEADER_SIZE, b"\0") + tail
    events, problems = parse_meta(meta, "pid-1.meta.jsonl")
    try:
        trace = trace_of(buf, Path("pid-1.ring"), events, problems)
    except TraceError:
        return
    assert len(trace.records) <= len(tail) // L.RECORD_SIZE
    rank_flow(trace.records, trace.meta, trace.group_names())  # its recorded path: no raise
    assert not ACTS.search(trace.header.host)
    assert not any(ACTS.search(r.callsite) for r in trace.records)


@settings(SETTINGS, max_examples=40)
@given(st.lists(st.binary(max_size=80) | JSON.map(lambda v: json.dumps(v).encode()),
                max_size=8))
def test_a_meta_log_is_events_or_a_problem(lines):
    lines = [*lines, b'{"event": "x", "op": "a\x7fb"}',  # a raw DEL, a raw C1: legal JSON
             b'{"event": "x", "op": "a\xc2\x9bb"}']
    events, problems = parse_meta(b"\n".join(lines), "m")
    assert all(isinstance(e, dict) and isinstance(e.get("event"), str) for e in events)
    assert len(problems) <= 1 and not any(ACTS.search(t) for t in _texts(events))


@SETTINGS
@given(depth=st.integers(0, 3000), number=st.sampled_from(["1e999", "-1e400", "9" * 30,
                                                           "NaN", "Infinity", "7", "1.5"]))
def test_json_is_bounded_in_depth_and_numbers(depth, number):
    data = ("[" * depth + number + "]" * depth).encode()
    try:
        value = load_json(data, "x")
    except BadInput as e:
        assert e.damaged and "\n" not in str(e)
        assert depth > MAX_DEPTH or number not in ("7", "1.5")
        return
    assert depth <= MAX_DEPTH + 1 and number in ("7", "1.5")
    assert value is not None


def _dump(entries, configs, rank):
    return json.dumps({"version": "2.10", "rank": rank, "entries": entries,
                       "pg_config": configs, "pg_status": {"0": {"last_completed_collective": 1}}})


@settings(SETTINGS, max_examples=40)
@given(entries=st.lists(st.dictionaries(st.sampled_from(
           ["collective_seq_id", "profiling_name", "input_sizes", "input_dtypes", "pg_id",
            "process_group", "retired", "time_created_ns", "is_p2p", "state"]), JSON,
           max_size=6), max_size=5),
       members=st.lists(st.integers(-5, 2_000_000), max_size=6) | st.text(max_size=20),
       rank=JSON)
def test_a_dump_that_lies_is_refused_in_one_line(entries, members, rank):
    """A dump naming any ranks, sizes, ops and numbers: a UserError of one line, or a dump
    whose world stays within what one dump can make believable."""
    raw = _dump(entries, {"": {"ranks": members}}, rank).encode()
    try:
        runs, world = rank_runs([dump_of(raw, Path("fr-0"))])
    except UserError as e:
        assert "\n" not in str(e)
        return
    assert world <= RANKS_PER_TRACE and all(r < RANKS_PER_TRACE for r in runs)


HOSTILE = st.lists(st.text(max_size=5) | st.sampled_from(
    ["\x1b]52;c;x\x07", "\x1b[2J", "\x9b", "\u202e", "[link=http://e]a[/link]", "\n"]),
    max_size=6).map("".join)


@SETTINGS
@given(text=HOSTILE, other=JSON)
def test_a_hostile_report_never_writes_to_the_terminal(text, other):
    """A report whose every field may hold escape sequences, markup or odd types: the
    console prints it with nothing a terminal acts on (or `validate` refuses it)."""
    report = {"schema": "ddpdoctor.report/1", "outcome": text, "world_size": other,
              "command": [text], "problems": [text, other],
              "ranks": [{"rank": 0, "host": text, "state": text, "pid": other,
                         "current": {"op": text, "callsite": text, "seq": other,
                                     "shapes": other, "dtypes": other}, "stack": other},
                        {"rank": 1, "current": other}],
              "waits": other,
              "findings": [{"kind": text, "severity": "error", "ranks": [0], "seq": other,
                            "summary": text, "detail": text, "fix": text,
                            "evidence": {"why": text}}],
              "timeline": {"0": [{"group": other, "seq": other, "op": text, "start": other,
                                  "callsite": text, "shapes": other}]}}
    try:
        report = validate(report, Path("r.json"))
    except UserError:
        return
    out = io.StringIO()
    print_summary(report, None, SafeConsole(file=out, width=100, force_terminal=True))
    printed = re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue())  # the console's own colours
    assert "\x1b" not in printed and not ACTS.search(printed.replace("\n", "")), repr(printed)
    view = ReportView.from_dict(report)  # the UI's model of it, every string made safe
    assert not any(ACTS.search(t) for t in _texts([view.outcome, view.command, view.problems]))
    assert all(not ACTS.search(c.callsite) for row in view.timeline.values() for c in row)


KEY = channel_key("a-secret-of-sixteen-characters")


@SETTINGS
@given(st.binary(max_size=200))
def test_a_handshake_step_is_refused_unless_it_proves_the_secret(data):
    try:
        LeaderHandshake(KEY).answer(data)
    except Refused:
        pass
    else:
        raise AssertionError("an answer passed without the secret")
    node = NodeHandshake(KEY)
    try:
        node.answer(data)
        node.session(data)
        raise AssertionError("a proof passed without the secret")
    except Refused:
        pass


@SETTINGS
@given(frames=st.lists(st.binary(max_size=120), max_size=5),
       value=JSON, replay=st.booleans())
def test_only_this_sessions_frames_in_order_are_opened(frames, value, replay):
    """Random frames, a frame of another session, a frame of this session sent twice: only
    this session's, each once and in order, open."""
    node, leader = Session(b"s" * 32, leader=False), Session(b"s" * 32, leader=True)
    other = Session(b"t" * 32, leader=False)
    for raw in [*frames, other.seal("report", value)]:
        try:
            leader.open(raw)
            raise AssertionError("a frame opened that this session never sealed")
        except Refused:
            pass
    frame = node.seal("report", value)
    assert leader.open(frame) == ("report", json.loads(json.dumps(value)))
    if replay:
        try:
            leader.open(frame)
            raise AssertionError("a replayed frame opened")
        except Refused as e:
            assert "out of order" in str(e)


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(topic=st.sampled_from(["report", "hello", "beat", "nope", ""]), value=JSON,
       names=st.lists(st.text(max_size=30), max_size=4))
def test_a_peers_copy_stays_in_its_mirror(tmp_path_factory, topic, value, names):
    """A frame's body from a peer holding the secret: parsed or refused; its copy, named as
    it likes (``..``, absolute, nested, a link's name), lands inside the mirror or is a
    problem line, and nothing else is raised."""
    top = tmp_path_factory.mktemp("mirror")
    files = [{"name": n, "data": "e30K"} for n in names] + \
        [{"name": n, "offset": 3, "data": "e30K"} for n in names]
    body = body_of(topic, {"delta": {"files": files, "rings": [value]}, "t": value})
    try:
        topic, parsed = parse_body(body)
    except Refused:
        return
    report = NodeReport.parse(parsed)
    problems = apply_delta(top / "m", report.delta)
    assert all("\n" not in p for p in problems)
    outside = [p for p in top.rglob("*") if not str(p).startswith(str(top / "m"))]
    assert not outside
    allowed = {"traces", "stacks", "flight_recorder", "run.json", "supervisor.jsonl"}
    assert {p.name for p in (top / "m").iterdir()} <= allowed


def test_a_frame_header_past_the_limit_closes_the_connection_unread():
    import socket

    from ddpdoctor.supervisor.node_frames import ChannelError, Framed

    a, b = socket.socketpair()
    link = Framed(a)
    b.sendall(struct.pack(">I", 0x7FFFFFF0) + b"x" * 100)
    try:
        link.read(0.0)
        raise AssertionError("read a frame of 2 GiB")
    except ChannelError as e:
        assert "closed unread" in str(e)
    finally:
        a.close()
        b.close()
