"""Does the same job get the same verdict every time?  Runs each bug of the causal model's
classes (the catalogue's entries and the shapes of tests/integration/shapes.py) N times
under ``ddpdoctor run`` and compares what the user is told: the outcome, the first error's
kind and ranks, and the file:line sites its summary names; runs each fixed twin once (it
must complete with no finding).

    python -m tests.stability                 # 5 runs of each, 2 at a time
    python -m tests.stability --runs 3 --only frozen_on_one_rank_2ranks --jobs 1

Prints one line a bug (its verdict, and how many runs gave it); exits 1 when a bug's runs
disagree.  Not part of the suite (about 25 minutes on two cores); its last count is in the
README."""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

from ddpdoctor import bugs
from tests.conftest import run_doctor
from tests.integration.sample_runs import SAMPLE_BUGS, suite_command
from tests.integration.shapes import MORE_SHAPES, SHAPES, shape_bug

CLASSES = ("frozen_on_one_rank", "no_sync_token_count", "all_to_all_split_own_data",
           "early_stop_closing_barrier", "time_budget_exit", "checkpoint_on_own_clock",
           "loss_log_extra_allreduce_rank0", "nan_loss_skip_one_rank", "eval_ddp_forward_rank0",
           "dtensor_full_tensor_rank0", "fsdp2_eval_rank0",
           "lightning_log_sync_dist_rank0",
           "sampler_seed_per_rank", "busy_straggler_finishes", "oom_killed_mid_epoch",
           "crash_mid_epoch")
_SITE = re.compile(r"[\w.-]+\.py:\d+")


def entries() -> list[bugs.Bug]:
    return [bugs.find_bug(n) for n in CLASSES] + [shape_bug(s) for s in SHAPES + MORE_SHAPES]


def verdict(bug: bugs.Bug, where: Path, fixed: bool = False) -> tuple:
    """What one run of ``bug`` (its twin: ``fixed``) told: outcome, first error (else
    warning) kind, ranks, sites."""
    args = ["run", "--hang-timeout", str(bug.hang_timeout), *suite_command(bug, fixed)]
    run = run_doctor(args, where, cwd=SAMPLE_BUGS, timeout=300)
    try:
        report = json.loads((where / "run" / "report.json").read_text())
    except (OSError, ValueError):
        return ("no report", run.returncode)
    serious = [f for f in report["findings"] if f["severity"] == "error"] or \
        [f for f in report["findings"] if f["severity"] == "warning"]
    if not serious:
        return (report.get("outcome"), "no finding")
    f = serious[0]
    return (report.get("outcome"), f["kind"], f["severity"], tuple(sorted(f["ranks"])),
            tuple(sorted(set(_SITE.findall(f["summary"])))))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=2, help="runs at a time")
    ap.add_argument("--only", nargs="*", help="these bugs or shapes only")
    a = ap.parse_args(argv)
    todo = [b for b in entries() if not a.only or b.name in a.only]
    if not todo:
        print("stability: no such bug or shape", file=sys.stderr)
        return 2
    base = Path(tempfile.mkdtemp(prefix="ddpdoctor-stability-"))
    work = [(b, base / f"{b.name}-{i}", False) for b in todo for i in range(a.runs)]
    work += [(b, base / f"{b.name}-fixed", True) for b in todo]
    for _, where, _ in work:
        where.mkdir(parents=True)
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        told = list(pool.map(lambda w: verdict(*w), work))
    twins = {bug.name: v for (bug, _, fixed), v in zip(work, told) if fixed}
    unclean = [name for name, v in twins.items() if v[:2] != ("completed", "no finding")]
    unstable = 0
    for b in todo:
        seen = Counter(v for (bug, _, fixed), v in zip(work, told)
                       if bug.name == b.name and not fixed)
        (top, n), = seen.most_common(1)
        ok = len(seen) == 1
        unstable += not ok
        print(f"{'same' if ok else 'DIFFERS'} {n}/{a.runs} {b.name}: {top}"
              + ("" if ok else f"; also {[v for v in seen if v != top]}"), flush=True)
    for name in unclean:
        print(f"TWIN NOT CLEAN {name}: {twins[name]}", flush=True)
    print(f"{len(todo) - unstable} of {len(todo)} stable over {a.runs} runs; twins clean: "
          f"{len(twins) - len(unclean)} of {len(twins)}; runs in {base}")
    return 1 if unstable or unclean else 0


if __name__ == "__main__":
    sys.exit(main())
