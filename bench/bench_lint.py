"""`ddpdoctor lint` speed: 10,000 lines of training scripts in under 2 s.

    python bench/bench_lint.py               # 10,000 lines, the budget check
    python bench/bench_lint.py --lines 50000

The corpus is the bug catalogue's scripts (real DDP code: loaders, DDP, collectives under
conditions, frameworks), copied under new names until it holds the lines asked for, linted
as one program (the summaries see every file). The reference measured in the same run is
``ast.parse`` of the same files, the floor any linter pays; the ratio says what the analysis
adds. CPU time of this process is measured (the machine may be shared), wall time shown too.
Exits 1 when lint takes more than the budget.
"""

from __future__ import annotations

import argparse
import ast
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ddpdoctor.lint.engine import lint_files  # noqa: E402

BUDGET_S = 2.0


def build_corpus(where: Path, lines: int) -> list[Path]:
    """Copies of sample_bugs/*.py under new names until ``lines`` lines are written."""
    sources = [p.read_text() for p in sorted((ROOT / "sample_bugs").glob("*.py"))]
    sources = [s for s in sources if _parses(s)]
    files, total, i = [], 0, 0
    while total < lines:
        text = sources[i % len(sources)]
        path = where / f"script_{i:04d}.py"
        path.write_text(text)
        files.append(path)
        total += text.count("\n")
        i += 1
    return files


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
    except SyntaxError:
        return False
    return True


def timed(fn, *args) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one call."""
    cpu, wall = time.process_time(), time.perf_counter()
    fn(*args)
    return time.process_time() - cpu, time.perf_counter() - wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        files = build_corpus(Path(tmp), args.lines)
        n = sum(p.read_text().count("\n") for p in files)
        parse_cpu, _ = timed(lambda: [ast.parse(p.read_text()) for p in files])
        lint_files(files[:3])  # warm the imports
        runs = [timed(lint_files, files) for _ in range(3)]
        cpu, wall = min(r[0] for r in runs), min(r[1] for r in runs)
        findings = len(lint_files(files))
    ok = cpu <= BUDGET_S
    print(f"lint: {n} lines in {len(files)} files: {cpu:.2f} s CPU ({wall:.2f} s wall), "
          f"{findings} findings; ast.parse alone {parse_cpu:.2f} s: ratio {cpu / parse_cpu:.1f}x; "
          f"budget {BUDGET_S:.1f} s: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
