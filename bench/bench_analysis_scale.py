"""Analysis at scale: 1,024 ranks x 10,000 collectives, one divergent rank, found by
ddpdoctor.analysis.align.fast_scan within 5 s and 2 GiB; `ddpdoctor analyze` end to end within
1.55x the scan's own time (10 s against 6.5 s at 8,192 x 2,000) and 1 GiB.

    python bench/bench_analysis_scale.py                 # 1024 x 10000, the budget check
    python bench/bench_analysis_scale.py --ranks 8192 --collectives 2000   # the big job
    python bench/bench_analysis_scale.py --ranks 64 --slow   # also time the object path

The traces are written directly with numpy in TraceWriter's layout (header + ring of
records + meta log); the analysis runs in a child process so that its peak RSS
(``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss``) is its own.  Exits 1 when the budget
is exceeded or the planted divergence is not found.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ddpdoctor.analysis.load.trace_words import RECORD_DTYPE  # noqa: E402
from ddpdoctor.trace import layout as L  # noqa: E402

BUDGET_S = 5.0
BUDGET_BYTES = 2 << 30
END_TO_END_RATIO = 1.55  # `ddpdoctor analyze` wall / the scan's wall, measured in one run
END_TO_END_BYTES = 1 << 30
# A training step's collectives: bucketed all_reduces and a buffer broadcast.
STEP = [
    ("all_reduce", "sum", -1, b"262144||float32|/work/job/train.py:88"),
    ("all_reduce", "sum", -1, b"1048576||float32|/work/job/train.py:88"),
    ("all_reduce", "sum", -1, b"65536||float32|/work/job/train.py:88"),
    ("broadcast", "", 0, b"128||float32|/work/job/train.py:61"),
    ("all_reduce", "avg", -1, b"1||float32|/work/job/train.py:97"),
]


def template(n: int) -> np.ndarray:
    """``n`` collective records of a healthy rank (commit, seq, times filled per rank)."""
    recs = np.zeros(n, RECORD_DTYPE)
    i = np.arange(n)
    which = i % len(STEP)
    recs["kind"] = int(L.RecordKind.COLLECTIVE)
    recs["op"] = np.array([L.OP_CODES[s[0]] for s in STEP])[which]
    recs["reduce_op"] = np.array([L.REDUCE_OPS.index(s[1]) for s in STEP])[which]
    recs["peer"] = np.array([s[2] for s in STEP])[which]
    recs["numel"] = np.array([int(s[3].split(b"|")[0]) for s in STEP])[which]
    recs["text"] = np.array([s[3] for s in STEP], dtype=f"S{L.TEXT_SIZE}")[which]
    recs["parent"] = -1
    recs["seq"] = i
    recs["commit"] = i + 1
    return recs


def header(rank: int, world: int, pid: int, count: int, capacity: int, t0: int) -> bytes:
    raw = bytearray(L.HEADER_SIZE)
    L.HEADER.pack_into(raw, 0, L.MAGIC, L.VERSION, L.RECORD_SIZE, capacity, pid, rank, world,
                       rank % 8, int(L.RankState.EXITED), 0, count // len(STEP), 0, count,
                       t0 + count * 1_000_000, count - 1, t0, f"node{rank // 8}".encode(),
                       b"bench")
    return bytes(raw)


def write_job(run_dir: Path, ranks: int, collectives: int, culprit: int, bad_seq: int,
              callsite_noise: bool = False) -> None:
    """A finished job whose rank ``culprit`` all-reduces 11 elements at ``bad_seq``."""
    traces = run_dir / "traces"
    traces.mkdir(parents=True, exist_ok=True)
    (run_dir / "run.json").write_text(json.dumps({"run_id": "bench", "command": ["bench"]}))
    base = template(collectives)
    group = json.dumps({"index": 0, "name": "0", "ranks": list(range(ranks)), "size": ranks,
                        "default": True, "event": "group", "t": 1})  # the writer's order
    t0 = 1_700_000_000 * 10**9
    step_ns = np.arange(collectives, dtype=np.int64) * 1_000_000
    for rank in range(ranks):
        pid = 100_000 + rank
        recs = base.copy()
        recs["t_start"] = t0 + step_ns + rank * 1000
        recs["t_end"] = recs["t_start"] + 500_000
        if rank == culprit:
            recs[bad_seq]["text"] = b"11||float32|/work/job/train.py:120"
            recs[bad_seq]["numel"] = 11
        if callsite_noise and rank % 2:
            recs["text"] = np.char.replace(recs["text"], b"/work/job/", b"/home/n1/job/")
        with open(traces / f"pid-{pid}.ring", "wb") as f:
            f.write(header(rank, ranks, pid, collectives, collectives, t0))
            f.write(recs.tobytes())
        with open(traces / f"pid-{pid}.meta.jsonl", "w") as f:
            f.write(json.dumps({"event": "process", "pid": pid, "t": t0}) + "\n")
            f.write(json.dumps({"event": "init", "rank": rank, "world_size": ranks,
                                "t": t0}) + "\n")
            f.write(group + "\n")


def analyze_child(run_dir: Path, slow: bool) -> None:
    """In the child: run the fast path (and the object path if asked), print JSON."""
    from ddpdoctor.analysis.align.fast_scan import scan

    t = time.perf_counter()
    result = scan([run_dir])
    fast_s = time.perf_counter() - t
    out = {"seconds": fast_s, "ranks": result.ranks, "collectives": result.collectives,
           "problems": result.problems[:5],
           "divergences": [{"group": d.group, "seq": d.seq, "state": d.state.value,
                            "culprits": list(d.culprits)} for d in result.divergences]}
    if slow:
        from ddpdoctor.analysis.causal.mismatch import divergences
        from ddpdoctor.analysis.load.run_dirs import load_job

        t = time.perf_counter()
        job = load_job([run_dir], stacks=False)
        slow_divs = divergences(job)
        out["slow_seconds"] = time.perf_counter() - t
        out["slow_divergences"] = [{"group": d.group, "seq": d.seq, "state": d.state.value,
                                    "culprits": list(d.culprits)} for d in slow_divs]
    print(json.dumps(out))


def _time_cli_analyze(run_dir: Path, culprit: int) -> tuple[float, bool]:
    """Wall time of the whole `ddpdoctor analyze RUN_DIR`, and whether it blames ``culprit``
    (exit 1: an error was named, as the planted mismatch must be; 0 would be a miss, 2 a
    failure to read the job).  Prints the size of what it printed and of the first finding."""
    report = run_dir / "report.bench.json"
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "ddpdoctor.cli", "analyze", str(run_dir),
                           "--report", str(report)], capture_output=True, text=True,
                          cwd=ROOT, check=False)
    wall = time.perf_counter() - t
    if done.returncode != 1:
        print(f"`ddpdoctor analyze` exited {done.returncode}, not 1 (an error named):\n"
              + done.stderr[-2000:], file=sys.stderr)
        return wall, False
    findings = json.loads(report.read_text())["findings"]
    if findings:
        first = findings[0]
        print(f"printed summary: {len(done.stdout.encode()):,} bytes, "
              f"{done.stdout.count(chr(10))} lines; finding 1: summary "
              f"{len(first['summary'].encode()):,} bytes, detail "
              f"{len(first['detail'].encode()):,} bytes")
    return wall, bool(findings) and findings[0]["ranks"] == [culprit]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=1024)
    p.add_argument("--collectives", type=int, default=10_000)
    p.add_argument("--dir", type=Path, help="where to write the traces (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the traces")
    p.add_argument("--reuse", action="store_true",
                   help="with --dir: analyse the job already written there")
    p.add_argument("--slow", action="store_true",
                   help="also run the object path (load_job + matcher) and compare")
    p.add_argument("--callsite-noise", action="store_true",
                   help="odd ranks run the script from another path (call sites differ)")
    p.add_argument("--analyze-only", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.analyze_only:
        analyze_child(args.analyze_only, args.slow)
        return 0
    tmp = args.dir or Path(tempfile.mkdtemp(prefix="ddpdoctor-scale-"))
    culprit, bad_seq = args.ranks * 3 // 4 + 1, args.collectives * 7 // 10 + 3
    t = time.perf_counter()
    if not (args.reuse and (tmp / "run.json").exists()):
        write_job(tmp, args.ranks, args.collectives, culprit, bad_seq, args.callsite_noise)
        print(f"wrote {args.ranks} ranks x {args.collectives} collectives "
              f"({args.ranks * args.collectives * L.RECORD_SIZE / 2**30:.2f} GiB) in "
              f"{time.perf_counter() - t:.1f} s to {tmp}")
    try:
        cmd = [sys.executable, __file__, "--analyze-only", str(tmp)] + \
            (["--slow"] if args.slow else [])
        t = time.perf_counter()
        child = subprocess.run(cmd, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t
        if child.returncode != 0:
            print(child.stderr, file=sys.stderr)
            return 1
        out = json.loads(child.stdout.strip().splitlines()[-1])
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
        cli_wall, cli_ok = _time_cli_analyze(tmp, culprit)
        cli_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    finally:
        if not args.keep and args.dir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    found = out["divergences"]
    ok_found = (len(found) == 1 and found[0]["seq"] == bad_seq and
                found[0]["culprits"] == [culprit] and found[0]["state"] == "shape")
    print(f"analysis: {out['seconds']:.2f} s (child wall {wall:.2f} s incl. interpreter "
          f"start), peak RSS {peak / 2**20:.0f} MiB, {out['collectives']:,} collectives of "
          f"{out['ranks']} ranks")
    print(f"found: {found} (planted: rank {culprit} at seq {bad_seq})")
    if "slow_seconds" in out:
        same = out["slow_divergences"] == found
        print(f"object path: {out['slow_seconds']:.2f} s "
              f"({out['slow_seconds'] / max(out['seconds'], 1e-9):.0f}x slower), "
              f"same answer: {same}")
        ok_found = ok_found and same
    ratio = cli_wall / max(wall, 1e-9)
    print(f"`ddpdoctor analyze` end to end (report.json + summary): {cli_wall:.2f} s, "
          f"{ratio:.2f}x the scan's child wall, peak RSS <= {cli_peak / 2**20:.0f} MiB, "
          f"names rank {culprit}: {cli_ok}")
    scan_ok = out["seconds"] <= BUDGET_S and peak <= BUDGET_BYTES
    whole_ok = ratio <= END_TO_END_RATIO and cli_peak <= END_TO_END_BYTES
    ok = ok_found and cli_ok and scan_ok and whole_ok
    print(f"budget: scan {BUDGET_S:.0f} s / {BUDGET_BYTES >> 30} GiB "
          f"{'OK' if scan_ok else 'FAILED'}; analyze {END_TO_END_RATIO}x the scan / "
          f"{END_TO_END_BYTES >> 30} GiB {'OK' if whole_ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
