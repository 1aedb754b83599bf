"""Bad input, fuzzed: truncated, corrupt and hostile traces, meta logs, stacks, run.json and
report.json for `ddpdoctor analyze`, `ddpdoctor ui`'s loader and the supervisor's reader.

Every input ends in a clear error (a UserError, exit status 1 or 2) or a report that
notes the damage: never an uncaught exception, never a hang.

The suite's run draws the same examples every time (a red suite is a change's fault, not the
draw's). To look for new damage, draw afresh and more:
``DDPDOCTOR_FUZZ_RANDOM=1 DDPDOCTOR_FUZZ_EXAMPLES=4000 pytest tests/robustness/test_fuzz.py``;
each damage found goes into the known-damage list below once fixed.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import struct
import tempfile
from pathlib import Path
from typing import Any, Iterator
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ddpdoctor.cli import main as cli_main
from ddpdoctor.errors import UserError
from ddpdoctor.report.load import load_report
from ddpdoctor.supervisor.watch import LiveJob
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.writer import TraceWriter

CALL_TIMEOUT_S = 20  # a call that takes longer is a hang
FUZZ = settings(max_examples=int(os.environ.get("DDPDOCTOR_FUZZ_EXAMPLES", "60")),
                derandomize=os.environ.get("DDPDOCTOR_FUZZ_RANDOM") != "1",
                deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                      HealthCheck.function_scoped_fixture])


class Hang(Exception):
    """The call under test did not return in time."""


@contextlib.contextmanager
def no_hang(seconds: float = CALL_TIMEOUT_S) -> Iterator[None]:
    def on_alarm(signum: int, frame: Any) -> None:
        raise Hang(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# -- a small job to damage ---------------------------------------------------------------

def _text(shapes: str, dtype: str = "float32", site: str = "/job/train.py:10") -> bytes:
    return f"{shapes}||{dtype}|{site}".encode()


def write_job(run_dir: Path, capacity: int = 16) -> list[Path]:
    """Two ranks and a launcher: a mismatch at seq 3 where rank 1 still waits, an
    exception on rank 0, py-spy stacks, run.json and supervisor.jsonl."""
    traces = run_dir / "traces"
    (run_dir / "stacks").mkdir(parents=True)
    traces.mkdir()
    (run_dir / "run.json").write_text(json.dumps({
        "run_id": "fuzz", "command": ["train.py"], "hang_timeout": 5.0}))
    t0 = 1_700_000_000 * 10**9
    paths = []
    for pid, rank in ((4001, 0), (4002, 1), (4000, -1)):
        with mock.patch("os.getpid", return_value=pid):
            w = TraceWriter(traces, "fuzz", capacity=capacity)
        paths.append(w.ring_path)
        if rank < 0:
            w.meta("child_exit", pid=4001, returncode=-6)
            w.close()
            continue
        w.set_identity(rank, 2, rank)
        w.meta("group", index=0, name="0", ranks=[0, 1], size=2, default=True)
        for seq in range(5):
            shapes = "11" if (rank == 1 and seq == 3) else "10"
            op = L.OP_CODES["broadcast" if seq == 4 else "all_reduce"]
            idx = w.append(int(L.RecordKind.COLLECTIVE), op, 1, 0, 0, seq, t0 + seq * 10**6,
                           0, 10, -1, 0, 40, -1, _text(shapes))
            if not (rank == 1 and seq == 4):
                w.set_end(idx, t0 + seq * 10**6 + 500)
            w.set_last_seq(seq)
        w.append(int(L.RecordKind.BATCH), L.OP_CODES["batch"], 0, 0, 0, 0, t0, t0, 4, -1, 0,
                 0, -1, b"abcdef")
        w.append(int(L.RecordKind.RING_STEP), L.OP_CODES["ring_recv"], 0, 32, 0, 1, t0, 0, 4,
                 0, 1, 16, 4, b"|||bucket 0 segment 1")
        if rank == 0:
            w.meta("exception", type="RuntimeError", message="boom", thread="main",
                   traceback=[{"filename": "/job/train.py", "line": 3, "name": "main"}])
            w.set_state(L.RankState.FAILED)
        w.close()
        (run_dir / "stacks" / f"pid-{pid}.json").write_text(json.dumps(
            {"pid": pid, "frames": [{"name": "main", "filename": "/job/train.py", "line": 9}]}))
    (run_dir / "supervisor.jsonl").write_text(
        json.dumps({"event": "rank_gone", "pid": 4001, "t": t0}) + "\n" +
        json.dumps({"event": "outcome", "outcome": "hung", "exit_code": 124, "t": t0}) + "\n")
    return paths


# -- hostile values --------------------------------------------------------------------

BIG_INTS = st.sampled_from([0, -1, 1, 2**31 - 1, -2**31, 2**63 - 1, -2**63, 2**64, 10**400])
HOSTILE_SCALARS = st.one_of(
    st.none(), st.booleans(), BIG_INTS, st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40), st.sampled_from(["\ud800", "\x00", "é" * 50, "x" * 5000]),
)
HOSTILE_JSON = st.recursive(
    HOSTILE_SCALARS,
    lambda children: st.one_of(st.lists(children, max_size=4),
                               st.dictionaries(st.text(max_size=10), children, max_size=4)),
    max_leaves=12)
FIELD_NAMES = st.sampled_from(
    ["event", "index", "name", "ranks", "size", "pid", "returncode", "t", "type", "message",
     "traceback", "thread", "frames", "error", "outcome", "exit_code", "rank", "command",
     "hang_timeout", "schema", "findings", "world_size", "state", "stack", "current",
     "timeline", "profile", "seq", "shapes", "dtypes", "evidence", "severity", "kind"])
EVENTS = st.sampled_from(["group", "exception", "child_exit", "init", "process", "exit",
                          "runtime_error", "rank_gone", "rank_stopped", "outcome", "stop",
                          "verdict", "stacks"])


@st.composite
def hostile_event(draw) -> bytes:
    obj = draw(st.dictionaries(FIELD_NAMES, HOSTILE_JSON, max_size=6))
    if draw(st.booleans()):
        obj["event"] = draw(EVENTS)
    return json.dumps(obj).encode()


def deep(n: int) -> bytes:
    return b"[" * n + b"]" * n


HOSTILE_LINES = st.one_of(
    hostile_event(),
    st.binary(max_size=200),
    st.sampled_from([deep(100_000), b'{"event": "group", "index": ' + deep(5000) + b"}",
                     b'{"event": "group", "index": 1e999999}', b"\xff\xfe\xfd",
                     b'{"event": "group", "index": 0, "name": "\\ud800", "ranks": [0, 1]}',
                     b'{"event": "exception", "traceback": "not a list", "thread": "main"}',
                     b'{"event": "child_exit", "pid": [4001], "returncode": "x"}',
                     b'{"event": "outcome", "outcome": {"x": 1}, "exit_code": 1e308}',
                     b'{"event": "rank_gone", "pid": 4002, "t', b"\x00" * 1000]),
)


# -- mutations of the files ------------------------------------------------------------

HEADER_OFFSETS = {name: off for name, off in (
    ("capacity", 20), ("pid", 16), ("rank", L.OFF_RANK), ("world", L.OFF_WORLD),
    ("state", L.OFF_STATE), ("exit_code", L.OFF_EXIT_CODE), ("count", L.OFF_COUNT),
    ("step", L.OFF_STEP), ("last_seq", L.OFF_LAST_SEQ), ("heartbeat", L.OFF_HEARTBEAT))}
RECORD_FIELDS = {"kind": (8, "<B"), "op": (9, "<B"), "reduce_op": (10, "<B"),
                 "group": (12, "<i"), "seq": (16, "<q"), "t_start": (24, "<q"),
                 "t_end": (32, "<q"), "numel": (40, "<q"), "peer": (48, "<i"),
                 "parent": (64, "<q")}
HOSTILE_TEXTS = st.one_of(
    st.binary(max_size=L.TEXT_SIZE),
    st.sampled_from([b"9" * 100 + b"|||x", b"x|y|z|w", b"10;;;;|-|\xff\xfe|\xc3",
                     b"99999999999999999999x99999999999999|||", b"|||" + b"\xff" * 150,
                     b"-1x-5|||a:b:c", b"1x" * 60 + b"|||s.py:1"]))


@st.composite
def mutation(draw) -> tuple:
    kind = draw(st.sampled_from(["truncate", "bytes", "header", "record", "text",
                                 "meta_line", "meta_replace", "stack", "run_json",
                                 "supervisor", "remove", "directory", "empty"]))
    target = draw(st.integers(0, 2))
    if kind == "truncate":
        return kind, target, draw(st.integers(0, L.HEADER_SIZE + 20 * L.RECORD_SIZE))
    if kind == "bytes":
        return kind, target, draw(st.integers(0, L.HEADER_SIZE + 20 * L.RECORD_SIZE)), \
            draw(st.binary(min_size=1, max_size=64))
    if kind == "header":
        return kind, target, draw(st.sampled_from(sorted(HEADER_OFFSETS))), \
            draw(st.integers(-2**31, 2**31 - 1) | st.sampled_from([0, -1, 2**31 - 1]))
    if kind == "record":
        name = draw(st.sampled_from(sorted(RECORD_FIELDS)))
        fmt = RECORD_FIELDS[name][1]
        bits = struct.calcsize(fmt) * 8
        lo, hi = (0, 2**bits - 1) if fmt == "<B" else (-2**(bits - 1), 2**(bits - 1) - 1)
        return kind, target, draw(st.integers(0, 7)), name, \
            draw(st.integers(lo, hi) | st.sampled_from([lo, hi, 0, -1 if lo < 0 else 0]))
    if kind == "text":
        return kind, target, draw(st.integers(0, 7)), draw(HOSTILE_TEXTS)
    if kind in ("meta_line", "meta_replace", "supervisor"):
        return kind, target, draw(st.lists(HOSTILE_LINES, min_size=1, max_size=4))
    if kind in ("stack", "run_json"):
        return kind, target, draw(st.one_of(HOSTILE_JSON.map(lambda v: json.dumps(v).encode()),
                                            st.binary(max_size=100),
                                            st.just(deep(50_000))))
    return kind, target, draw(st.sampled_from(["ring", "meta", "stack"]))


def apply(run_dir: Path, rings: list[Path], m: tuple) -> None:
    kind, target = m[0], m[1]
    ring = rings[target]
    meta = ring.with_name(ring.name.replace(".ring", ".meta.jsonl"))
    stack = run_dir / "stacks" / ring.name.replace(".ring", ".json")
    if kind == "truncate" and ring.is_file():
        os.truncate(ring, min(m[2], ring.stat().st_size))
    elif kind == "bytes" and ring.is_file():
        with open(ring, "r+b") as f:
            f.seek(min(m[2], ring.stat().st_size))
            f.write(m[3])
    elif kind == "header" and ring.is_file():
        with open(ring, "r+b") as f:
            f.seek(HEADER_OFFSETS[m[2]])
            f.write(struct.pack("<q" if m[2] in ("count", "step", "last_seq", "heartbeat")
                                else "<i", m[3]))
    elif kind == "record" and ring.is_file():
        off, fmt = RECORD_FIELDS[m[3]]
        with open(ring, "r+b") as f:
            f.seek(L.HEADER_SIZE + m[2] * L.RECORD_SIZE + off)
            f.write(struct.pack(fmt, m[4]))
    elif kind == "text" and ring.is_file():
        with open(ring, "r+b") as f:
            f.seek(L.HEADER_SIZE + m[2] * L.RECORD_SIZE + 72)
            f.write(m[3].ljust(L.TEXT_SIZE, b"\0")[:L.TEXT_SIZE])
    elif any(p.is_dir() for p in (meta, stack)) and kind in ("meta_line", "meta_replace",
                                                              "stack"):
        return  # made a directory by an earlier mutation
    elif kind == "meta_line":
        with open(meta, "ab") as f:
            f.write(b"\n".join(m[2]) + b"\n")
    elif kind == "meta_replace":
        meta.write_bytes(b"\n".join(m[2]))
    elif kind == "supervisor":
        with open(run_dir / "supervisor.jsonl", "ab") as f:
            f.write(b"\n".join(m[2]) + b"\n")
    elif kind == "stack":
        stack.write_bytes(m[2])
    elif kind == "run_json":
        (run_dir / "run.json").write_bytes(m[2])
    elif kind in ("remove", "directory", "empty"):
        path = {"ring": ring, "meta": meta, "stack": stack}[m[2]]
        if path.is_dir():
            return
        if path.is_file():
            path.unlink()
        if kind == "directory":
            path.mkdir(exist_ok=True)
        elif kind == "empty":
            path.write_bytes(b"")


@contextlib.contextmanager
def damaged_job(mutations: list[tuple], capacity: int) -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        rings = write_job(run_dir, capacity)
        for m in mutations:
            apply(run_dir, rings, m)
        yield run_dir


MUTATIONS = st.lists(mutation(), min_size=1, max_size=5)
CAPACITY = st.sampled_from([4, 16])  # 4: the ring has wrapped


# -- analyze -----------------------------------------------------------------------------

def _analyze(run_dir: Path) -> int:
    out = io.StringIO()
    with no_hang(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = cli_main(["analyze", str(run_dir), "--report", str(run_dir.parent / "r.json")])
    assert code in (0, 1, 2), code
    if code in (0, 1):  # 1: the report names an error (the diagnosing commands' rule)
        report = json.loads((run_dir.parent / "r.json").read_text())
        assert report["schema"] == "ddpdoctor.report/1"
        assert report["outcome"] in ("completed", "failed", "hung")
        json.dumps(report)  # serialisable as written
    return code


@FUZZ
@given(mutations=MUTATIONS, capacity=CAPACITY)
def test_analyze_survives_damaged_run_dirs(mutations, capacity):
    with damaged_job(mutations, capacity) as run_dir:
        _analyze(run_dir)


def test_analyze_of_the_intact_job_names_the_mismatch(tmp_path):
    run_dir = tmp_path / "run"
    write_job(run_dir)
    assert _analyze(run_dir) == 1  # an error finding
    report = json.loads((tmp_path / "r.json").read_text())
    kinds = {f["kind"] for f in report["findings"]}
    assert "collective_mismatch" in kinds


@pytest.mark.parametrize("damage", [
    ("header", 0, "capacity", 0), ("header", 0, "capacity", -5),
    ("header", 0, "capacity", 2**31 - 1), ("header", 1, "count", -1),
    ("header", 1, "count", 2**31 - 1), ("header", 0, "rank", 2**31 - 1),
    ("header", 0, "world", -7), ("header", 1, "world", 2**31 - 1),
    ("header", 2, "rank", 977_917), ("header", 0, "state", 99), ("truncate", 0, 10),
    ("truncate", 1, L.HEADER_SIZE + 100), ("record", 0, 2, "seq", 2**62),
    ("record", 1, 1, "group", -1), ("record", 1, 1, "group", 2**31 - 1),
    ("record", 0, 0, "op", 255), ("record", 0, 0, "kind", 0),
    ("record", 0, 3, "t_start", -2**63), ("record", 1, 4, "t_start", 2**63 - 1),
    ("text", 0, 3, b"99999999999999999999x99999999999999|||"),
    ("text", 1, 3, b"|||" + b"\xff" * 150),
    ("meta_replace", 0, [deep(100_000)]), ("meta_replace", 1, [b"\xff\xfe" * 1000]),
    ("meta_replace", 1, [b'{"event": "exception", "traceback": true}']),
    ("meta_line", 1, [b'{"t": {"": null}, "event": "exception"}']),
    ("supervisor", 0, [b'{"event": "outcome", "outcome": [1], "exit_code": "x"}']),
    ("stack", 0, deep(50_000)), ("run_json", 0, b'{"command": {"a": 1}, "hang_timeout": "x"}'),
    ("run_json", 0, b'{"hang_timeout": 1e999}'), ("run_json", 0, b'{"hang_timeout": -1}'),
    ("directory", 0, "ring"), ("directory", 1, "meta"), ("directory", 0, "stack"),
    ("empty", 1, "ring"), ("remove", 2, "ring"),
], ids=lambda d: "-".join(str(x)[:12] for x in d) if isinstance(d, tuple) else None)
def test_analyze_survives_each_known_damage(damage):
    with damaged_job([damage], 16) as run_dir:
        _analyze(run_dir)


def test_analyze_of_no_run_dir_is_a_user_error(tmp_path, capsys):
    assert cli_main(["analyze", str(tmp_path / "nope")]) == 2
    (tmp_path / "file").write_text("x")
    assert cli_main(["analyze", str(tmp_path / "file")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert all(line.startswith("ddpdoctor: ") for line in err)


# -- the supervisor's reader -----------------------------------------------------------

def _poll_live(run_dir: Path) -> None:
    with no_hang():
        live = LiveJob(run_dir)
        for _ in range(2):
            live.poll()
            live.check_processes()
            live.stopped()
            live.longest_wait()
            live.divergence()


@FUZZ
@given(mutations=MUTATIONS, capacity=CAPACITY)
@example(mutations=[("truncate", 0, 4105)], capacity=16)  # a ring shorter than one record
@example(mutations=[("bytes", 0, 4375, b"\x7f")], capacity=16)  # a seq far off (2**62)
def test_live_reader_survives_damaged_traces(mutations, capacity):
    with damaged_job(mutations, capacity) as run_dir:
        _poll_live(run_dir)


# -- report.json for `ddpdoctor ui` ---------------------------------------------------------

def _valid_report() -> dict[str, Any]:
    return json.loads((Path(__file__).parents[1] / "fixtures" /
                       "report_hang_4ranks.json").read_text())


def _load_for_ui(path: Path) -> None:
    with no_hang():
        try:
            report = load_report(path)
        except UserError as e:
            assert "\n" not in str(e) and str(path) in str(e)
            return
        assert isinstance(report["ranks"], list) and isinstance(report["findings"], list)
        try:
            from ddpdoctor.tui.model import ReportView
        except ImportError:
            return
        ReportView.from_dict(report)


@st.composite
def hostile_report(draw) -> bytes:
    report = _valid_report()
    for _ in range(draw(st.integers(1, 6))):
        where = draw(st.sampled_from(["top", "rank", "finding", "current", "stack"]))
        key, value = draw(FIELD_NAMES), draw(HOSTILE_JSON)
        ranks = [r for r in report.get("ranks") or [] if isinstance(r, dict)] \
            if isinstance(report.get("ranks"), list) else []
        findings = [f for f in report.get("findings") or [] if isinstance(f, dict)] \
            if isinstance(report.get("findings"), list) else []
        if where == "top":
            report[key] = value
        elif where == "rank" and ranks:
            ranks[draw(st.integers(0, len(ranks) - 1))][key] = value
        elif where == "finding" and findings:
            findings[0][key] = value
        elif where == "current" and ranks:
            ranks[0]["current"] = value
        elif where == "stack" and ranks:
            ranks[-1]["stack"] = [value, {"name": value, "line": value}]
    report["schema"] = draw(st.sampled_from(["ddpdoctor.report/1"] * 4 + ["x", None]))
    raw = json.dumps(report, allow_nan=True).encode()
    cut = draw(st.sampled_from([None, None, None, len(raw) // 2, 1, 0]))
    return raw if cut is None else raw[:cut]


@FUZZ
@given(raw=hostile_report())
def test_ui_loader_survives_hostile_reports(raw, tmp_path):
    path = tmp_path / "report.json"
    path.write_bytes(raw)
    _load_for_ui(path)


@pytest.mark.parametrize("raw", [
    b"", b"\xff\xfe\x00", deep(100_000), b'{"schema": "ddpdoctor.report/1"}',
    b'{"schema": "ddpdoctor.report/1", "ranks": {}, "findings": []}',
    b'{"schema": "ddpdoctor.report/1", "ranks": [1, "x", null], "findings": [[]]}',
    b'{"schema": "ddpdoctor.report/1", "ranks": [{"rank": 1e999, "pid": "x", "stack": 3,'
    b' "current": [], "recent": 5}], "findings": [{"ranks": "all", "seq": {}}],'
    b' "timeline": [], "profile": 7, "world_size": -1e308}',
    b'{"schema": "ddpdoctor.report/1", "ranks": [], "findings": [], "started_at": 1e999}',
    b'{"schema": "ddpdoctor.report/1", "ranks": [], "findings": [], "timeline": {"\\u00b2": 1,'
    b' "9' + b'9' * 5000 + b'": 2}}',
    b'[' * 10 + b'1',
], ids=lambda raw: f"{len(raw)}B-{raw[-24:]!r}")
def test_ui_loader_survives_each_known_damage(raw, tmp_path):
    path = tmp_path / "report.json"
    path.write_bytes(raw)
    _load_for_ui(path)


def test_live_reader_survives_a_trace_truncated_under_it(tmp_path):
    """A trace truncated in place after the supervisor mapped it: a problem noted, not a
    SIGBUS (run in a child: a SIGBUS would take pytest down)."""
    import subprocess
    import sys

    code = f"""
import os, struct, sys
from pathlib import Path
sys.path.insert(0, {str(Path(__file__).parents[2])!r})
from tests.robustness.test_fuzz import write_job
from ddpdoctor.supervisor.watch import LiveJob
from ddpdoctor.trace import layout as L
run_dir = Path({str(tmp_path)!r}) / "run"
rings = write_job(run_dir, capacity=64)
live = LiveJob(run_dir)
live.poll()
with open(rings[0], "r+b") as f:
    f.seek(L.OFF_COUNT)
    f.write(struct.pack("<q", 30))
os.truncate(rings[0], L.HEADER_SIZE)
live.poll()
live.divergence()
assert any("truncated" in p for p in live.problems), live.problems
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0 and "ok" in done.stdout, (done.returncode, done.stderr)
