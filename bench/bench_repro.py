"""`ddpdoctor repro` on the catalogue: each bug's repro, run as its header says, gives the
bug's first error finding, in how many lines and how many seconds.

    python bench/bench_repro.py                       # every bug and twin: run, then replay
    python bench/bench_repro.py metric_rank0_only     # some bugs only
    python bench/bench_repro.py --no-twins            # the bugs, not their fixed twins
    python bench/bench_repro.py --runs DIR            # replay runs made before: DIR/<name>/run
                                                      # and DIR/<name>-fixed/run (the layout
                                                      # the test suite's shared runs have)

For each bug (and its fixed twin) it prints a markdown row: the job's first error, the
repro's, whether they agree, the repro's lines, and the seconds of `ddpdoctor run` on the
repro (wall, from the command's start to its exit: python, torchrun, the ranks' torch
imports, the hang timeout the header asks for, the report). The reference measured in the
same run is `python -c "import torch"`, the floor of any rank's start. Goal: under 10 s on a
quiet machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ddpdoctor import bugs  # noqa: E402
from ddpdoctor.repro.command import write_repro  # noqa: E402
from ddpdoctor.repro.header import replay_args  # noqa: E402

def first_error(run_dir: Path) -> str:
    try:
        report = json.loads((run_dir / "report.json").read_text())
    except (OSError, ValueError):
        return "no report"
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    if not errors:
        return "none"
    f = errors[0]
    return f"{f['kind']} {sorted(f['ranks'])} seq {f['seq']}"


def job_run(bug: bugs.Bug, fixed: bool, where: Path, runs: Path | None) -> Path:
    """The run dir of the bug (or its twin): from ``runs`` when given, else run now."""
    key = f"{bug.name}{'-fixed' if fixed else ''}"
    if runs is not None:
        return runs / key / "run"
    run_dir = where / key / "run"
    subprocess.run(bugs.run_command(bug, fixed, [], run_dir), cwd=bugs.sample_bugs_dir(),
                   capture_output=True, timeout=600)
    return run_dir


def replay(run_dir: Path, where: Path) -> tuple[Path, int, float]:
    """Write the repro of ``run_dir`` and run its header's command: (its run dir, lines,
    seconds)."""
    where.mkdir(parents=True, exist_ok=True)
    script = write_repro(run_dir, where / "repro.py")
    text = script.read_text()
    args = replay_args(text) or []
    out = where / "run"
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "ddpdoctor.cli", "run", "--run-dir", str(out),
                    *args[:-1], str(script)], cwd=where, capture_output=True, timeout=600)
    return out, text.count("\n"), time.perf_counter() - start


def torch_import_s() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="bugs to measure (default: the catalogue)")
    ap.add_argument("--runs", type=Path, help="replay the run dirs under DIR instead of "
                    "running the bugs")
    ap.add_argument("--no-twins", action="store_true", help="leave out the fixed twins")
    args = ap.parse_args()
    chosen = [bugs.find_bug(n) for n in args.names] if args.names else list(bugs.CATALOGUE)
    print(f"reference: python -c 'import torch' {torch_import_s():.1f} s")
    print("| bug | first error of the job | of its repro | same | lines | s |")
    print("| --- | --- | --- | --- | ---: | ---: |")
    twins: list[tuple[str, str, int, float]] = []
    with tempfile.TemporaryDirectory(prefix="bench-repro-") as tmp:
        where = Path(tmp)
        for bug in chosen:
            for fixed in (False,) if args.no_twins else (False, True):
                key = f"{bug.name}{'-fixed' if fixed else ''}"
                run_dir = job_run(bug, fixed, where / "jobs", args.runs)
                if not (run_dir / "report.json").exists():
                    print(f"| `{key}` | no run dir at {run_dir} | | | | |")
                    continue
                out, lines, seconds = replay(run_dir, where / "repro" / key)
                job, rep = first_error(run_dir), first_error(out)
                if fixed:
                    twins.append((key, rep, lines, seconds))
                    continue
                same = "yes" if job == rep else ("**no** (known gap)" if bug.replay_gap
                                                 else "**no**")
                print(f"| `{bug.name}` | {job} | {rep} | {same} | {lines} | {seconds:.1f} |",
                      flush=True)
    clean = sum(1 for t in twins if t[1] == "none")
    if twins:
        print(f"\nfixed twins: {clean} of {len(twins)} repros end with no error, "
              f"{min(t[2] for t in twins)}-{max(t[2] for t in twins)} lines, "
              f"{min(t[3] for t in twins):.1f}-{max(t[3] for t in twins):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
