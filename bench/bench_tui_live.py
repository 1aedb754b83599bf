"""The live TUI's CPU with 64 ranks: reading the supervisor's live state vs rebuilding the report.

    python bench/bench_tui_live.py                 # 64 ranks, 20 s each way
    python bench/bench_tui_live.py --ranks 8 --seconds 10

A writer process plays the job and its supervisor: 64 rank traces (ddpdoctor's own ring
format, written by TraceWriter) each doing ~10 collectives a second, and the supervisor's
LiveJob following them with its LiveStateWriter publishing RUN_DIR/live.json (or not, for
the fallback path: the report rebuilt at every poll, as the live UI did before live.json).
In this process the app runs headless (App.run_test) on the live run dir for N seconds;
its CPU time (this process: the UI and its poll worker, not the writer) is reported as %
of one core, both ways in the same run, with their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FAKE_PID0 = 3_900_000  # above pid_max's default: no real process has these pids


def write_job(run_dir: Path, ranks: int, publish: bool, hz: float) -> None:
    """The writer: rank traces stepping at ``hz`` collectives a second, and the supervisor's
    live view of them (published to live.json when ``publish``)."""
    from ddpdoctor.supervisor.live_state import LiveStateWriter, WatchFacts
    from ddpdoctor.supervisor.watch import LiveJob
    from ddpdoctor.trace import layout as L
    from ddpdoctor.trace.writer import TraceWriter

    traces = run_dir / "traces"
    writers = []
    for r in range(ranks):
        with mock.patch("os.getpid", return_value=FAKE_PID0 + r):
            w = TraceWriter(traces, "bench", capacity=4096)
        w.set_identity(r, ranks, r % 8)
        w.meta("group", index=0, name="0", ranks=list(range(ranks)), size=ranks, default=True)
        w.set_state(L.RankState.COMPUTING)
        writers.append(w)
    live = LiveJob(run_dir)
    facts = WatchFacts(("train.py",), time.time_ns(), 60.0)
    state = LiveStateWriter(run_dir)
    text = b"4x4||float32|/job/train.py:42"
    seq, opened = 0, [None] * ranks
    next_step = time.monotonic()
    while True:
        now_ns = time.time_ns()
        for r, w in enumerate(writers):
            if opened[r] is not None:
                w.set_end(opened[r], now_ns)
            opened[r] = w.append(int(L.RecordKind.COLLECTIVE), L.OP_CODES["all_reduce"], 1,
                                 0, 0, seq, now_ns, 0, 16, -1, 0, 64, -1, text)
            w.set_last_seq(seq)
        seq += 1
        live.poll()
        if publish:
            state.publish(live, facts)
        next_step += 1.0 / hz
        time.sleep(max(0.0, next_step - time.monotonic()))


async def watch(run_dir: Path, seconds: float) -> tuple[float, int, int]:
    """CPU seconds this process used while the app followed the run for ``seconds``, its
    polls, and how many full reports the live path built."""
    from ddpdoctor.tui.app import make_app
    from ddpdoctor.tui.source import ReportSource

    source = ReportSource(run_dir, is_running=lambda: True)
    app = make_app(run_dir, live_command=["train.py"], source=source)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause(1.0)  # start-up and the first full build are not the steady state
        cpu0, polls0 = time.process_time(), app.polls
        await pilot.pause(seconds)
        cpu = time.process_time() - cpu0
        polls = app.polls - polls0
    return cpu, polls, source.follower.builds


def poll_only(run_dir: Path, seconds: float) -> tuple[float, int, int]:
    """The poll worker's part alone (no app): CPU seconds of ``seconds`` of 4 Hz polls
    (read the run, parse the view), the polls, and the full builds."""
    from ddpdoctor.tui.app import POLL_INTERVAL_S
    from ddpdoctor.tui.model import CollectiveParser, ReportView
    from ddpdoctor.tui.source import ReportSource

    source = ReportSource(run_dir, is_running=lambda: True)
    parser = CollectiveParser()
    ReportView.from_dict(source.poll(), parser)  # start-up and the first full build
    cpu, polls, last = 0.0, 0, None
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started, cpu0 = time.monotonic(), time.process_time()
        data = source.poll()
        if data is not last:
            ReportView.from_dict(data, parser)
            last = data
        cpu += time.process_time() - cpu0
        polls += 1
        time.sleep(max(0.0, POLL_INTERVAL_S - (time.monotonic() - started)))
    return cpu, polls, source.follower.builds


def one_way(ranks: int, seconds: float, publish: bool, hz: float,
            app: bool = True) -> tuple[float, int, int]:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        (run_dir / "traces").mkdir(parents=True)
        (run_dir / "run.json").write_text(json.dumps({"command": ["train.py"],
                                                      "hang_timeout": 60}))
        writer = subprocess.Popen([sys.executable, __file__, "--writer", str(run_dir),
                                   "--ranks", str(ranks), "--hz", str(hz)]
                                  + (["--publish"] if publish else []))
        try:
            deadline = time.monotonic() + 60
            while len(list((run_dir / "traces").glob("pid-*.ring"))) < ranks or \
                    (publish and not (run_dir / "live.json").exists()):
                if time.monotonic() > deadline or writer.poll() is not None:
                    raise SystemExit("the writer did not start")
                time.sleep(0.1)
            return asyncio.run(watch(run_dir, seconds)) if app else poll_only(run_dir, seconds)
        finally:
            writer.kill()
            writer.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--hz", type=float, default=10.0, help="collectives a second a rank")
    parser.add_argument("--writer", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--publish", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.writer is not None:
        write_job(args.writer, args.ranks, args.publish, args.hz)
        return 0
    print(f"{args.ranks} ranks, {args.hz:g} collectives/s each, {args.seconds:g} s each way "
          f"(load {os.getloadavg()[0]:.1f})")
    for app in (True, False):
        print("the app, headless (UI thread + poll worker):" if app else
              "the poll worker alone (read + parse, 4 Hz or as fast as it can):")
        rows = {}
        for name, publish in (("rebuilt report (no live.json)", False),
                              ("supervisor's live state", True)):
            cpu, polls, builds = one_way(args.ranks, args.seconds, publish, args.hz, app)
            rows[name] = (cpu / args.seconds * 100, cpu / max(polls, 1) * 1000)
            print(f"  {name:32s} {rows[name][0]:6.1f}% of a core, {polls / args.seconds:4.1f}"
                  f" polls/s, {rows[name][1]:7.1f} ms CPU a poll ({builds} full builds)")
        (before, before_poll), (after, after_poll) = rows.values()
        print(f"  live state / rebuilt: {after / before:.3f} of the CPU, "
              f"{after_poll / before_poll:.3f} of the CPU a poll")
    return 0


if __name__ == "__main__":
    sys.exit(main())
