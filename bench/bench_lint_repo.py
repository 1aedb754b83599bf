"""`ddpdoctor lint` on a whole real code base: about 1,000 files and 200,000 lines in at most
10 s of CPU on one core, with pyflakes on the same tree as the reference in the same run.

    python bench/bench_lint_repo.py              # 3 rounds, lint and pyflakes alternated
    python bench/bench_lint_repo.py --rounds 5

The tree is the union of four packages every machine with the test extras has (pyproject's
``compat``: lightning 2.6.6, accelerate 1.15.0, pytorch-ignite 0.5.5, and torchmetrics, which
lightning brings): their directories under site-packages, linted as one project (the directories
given, every file reported on, the imports between them followed). Here: 864 files, 206,000
lines. The reference is pyflakes (``pip install pyflakes``; a bench dependency, not the
tool's), checking the same files in this process. CPU time of this process is measured (the
machine may be shared): the least of the rounds for each, and their ratio. Exits 1 when lint
takes more than the budget.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ddpdoctor.lint.engine import lint_files, python_files  # noqa: E402

BUDGET_S = 10.0
PACKAGES = ("lightning", "torchmetrics", "ignite", "accelerate")


def tree() -> list[Path]:
    """The package directories of the tree; a one-line error when one is missing."""
    dirs = []
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise SystemExit(f"{name} is not installed: pip install -e '.[test]'")
        dirs.append(Path(spec.origin).parent)
    return dirs


def run_pyflakes(files: list[Path]) -> int:
    from pyflakes.api import check
    from pyflakes.reporter import Reporter

    class Quiet:
        def write(self, _text: str) -> None:
            return None

    reporter = Reporter(Quiet(), Quiet())
    return sum(check(f.read_text(encoding="utf-8", errors="replace"), str(f), reporter)
               for f in files)


def cpu(fn, *args) -> tuple[float, object]:
    start = time.process_time()
    out = fn(*args)
    return time.process_time() - start, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if importlib.util.find_spec("pyflakes") is None:
        print("the reference needs pyflakes: pip install pyflakes", file=sys.stderr)
        return 2
    dirs = tree()
    files = [p for p, _ in python_files(dirs)]
    lines = sum(p.read_bytes().count(b"\n") for p in files)
    lint_s, flakes_s, findings = [], [], 0
    for _ in range(args.rounds):
        t, found = cpu(lint_files, dirs)
        lint_s.append(t)
        findings = len(found)  # type: ignore[arg-type]
        t, _ = cpu(run_pyflakes, files)
        flakes_s.append(t)
    best, ref = min(lint_s), min(flakes_s)
    ok = best <= BUDGET_S
    print(f"lint: {len(files)} files, {lines} lines ({', '.join(PACKAGES)}): {best:.2f} s CPU, "
          f"{findings} findings; pyflakes {ref:.2f} s: ratio {best / ref:.1f}x; budget "
          f"{BUDGET_S:.0f} s: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
