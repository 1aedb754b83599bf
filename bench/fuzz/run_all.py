"""Run every fuzz harness in turn, niced, each for a set time; keep a small minimised corpus.

    python bench/fuzz/run_all.py --seconds 600            # every harness, 10 minutes each
    python bench/fuzz/run_all.py --only trace dump --seconds 60

One harness at a time (the machine's other work keeps its cores), under ``nice -n 10``.  Each
starts from ``corpus/<harness>`` (the kept corpus, with the seeds), grows a working corpus in
a temporary directory, then the two are merged (``-merge=1``: the inputs that add coverage)
back into ``corpus/<harness>``.  A crash, a hang past ``--timeout`` seconds or memory past
``--rss-mb`` leaves its input in ``crashes/`` and fails the run.  What each run did (time,
executions, coverage, crashes) is appended to ``results.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
HARNESSES = ("trace", "dump", "report", "frames", "run_dir")
MAX_LEN = 1 << 17
MAX_CORPUS_BYTES = 256 << 10  # per harness: the corpus is committed
MAX_CORPUS_FILES = 64


def _stat(log: str, name: str) -> int | None:
    m = re.findall(rf"stat::{name}:\s+(\d+)", log)
    return int(m[-1]) if m else None


def _keep_small(kept: Path) -> None:
    """The kept corpus within MAX_CORPUS_BYTES and MAX_CORPUS_FILES: its largest grown inputs
    go first (the seeds and the inputs of crashes fixed stay)."""
    grown = sorted((p for p in kept.iterdir() if not p.name.startswith(("seed-", "regress-"))),
                   key=lambda p: p.stat().st_size)
    total = sum(p.stat().st_size for p in kept.iterdir())
    count = len(list(kept.iterdir()))
    while grown and (total > MAX_CORPUS_BYTES or count > MAX_CORPUS_FILES):
        big = grown.pop()
        total -= big.stat().st_size
        count -= 1
        big.unlink()


def run_one(harness: str, seconds: int, timeout: int, rss_mb: int) -> dict:
    kept = HERE / "corpus" / harness
    kept.mkdir(parents=True, exist_ok=True)
    crashes = HERE / "crashes"
    crashes.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"fuzz-{harness}-"))
    script = str(HERE / f"fuzz_{harness}.py")
    args = [f"-max_total_time={seconds}", f"-timeout={timeout}", f"-rss_limit_mb={rss_mb}",
            f"-max_len={MAX_LEN}", "-print_final_stats=1",
            f"-artifact_prefix={crashes}/{harness}-"]
    wrapper = work.parent / f"{work.name}.sh"  # what libFuzzer's merge runs again
    wrapper.write_text(f"#!/bin/sh\nexec nice -n 10 {sys.executable} {script} \"$@\"\n")
    wrapper.chmod(0o700)
    env = {**os.environ, "FUZZ_SELF": str(wrapper)}
    started = time.time()
    done = subprocess.run(["nice", "-n", "10", sys.executable, script, str(work), str(kept),
                           *args], capture_output=True, text=True, cwd=HERE, env=env)
    wall = time.time() - started
    log = done.stdout + done.stderr
    cov = re.findall(r"cov: (\d+) ft: (\d+)", log)
    merged = Path(tempfile.mkdtemp(prefix=f"fuzz-{harness}-merged-"))
    subprocess.run(["nice", "-n", "10", sys.executable, script, "-merge=1", str(merged),
                    str(kept), str(work), f"-max_len={MAX_LEN}"],
                   capture_output=True, text=True, cwd=HERE, env=env)
    wrapper.unlink()
    if any(merged.iterdir()):
        for old in kept.iterdir():
            if not old.name.startswith(("seed-", "regress-")):
                old.unlink()
        for new in merged.iterdir():
            shutil.copy(new, kept / new.name)
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(merged, ignore_errors=True)
    _keep_small(kept)
    result = {"harness": harness, "seconds": round(wall), "exit": done.returncode,
              "executions": _stat(log, "number_of_executed_units"),
              "peak_rss_mb": _stat(log, "peak_rss_mb"),
              "coverage": int(cov[-1][0]) if cov else None,
              "features": int(cov[-1][1]) if cov else None,
              "corpus_files": len(list(kept.iterdir())),
              "corpus_bytes": sum(p.stat().st_size for p in kept.iterdir()),
              "crash": done.returncode != 0, "load": round(os.getloadavg()[0], 1),
              "when": time.strftime("%Y-%m-%d %H:%M")}
    if done.returncode != 0:
        result["tail"] = log[-3000:]
    with open(HERE / "results.jsonl", "a") as f:
        f.write(json.dumps(result) + "\n")
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=int, default=600)
    ap.add_argument("--only", nargs="*", default=list(HARNESSES))
    ap.add_argument("--timeout", type=int, default=10, help="seconds one input may take")
    ap.add_argument("--rss-mb", type=int, default=2048)
    args = ap.parse_args()
    failed = 0
    for harness in args.only:
        r = run_one(harness, args.seconds, args.timeout, args.rss_mb)
        failed += r["crash"]
        print(json.dumps({k: v for k, v in r.items() if k != "tail"}), flush=True)
        if r["crash"]:
            print(r["tail"], file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
