"""Fuzz the run dir's small files: run.json, facts.json, lint.json, a node's node.json, a py-spy
stack file, the supervisor's log, as a hostile run dir holds them, read by ``load_job``.

    nice -n 10 python bench/fuzz/fuzz_run_dir.py bench/fuzz/corpus/run_dir -max_total_time=600

An input's first byte chooses the file; the rest is its content, written into a run dir
that also holds one real rank's trace (in /dev/shm).  ``load_job`` may refuse the dir
(UserError, one line) and must not raise anything else; the job it loads names only the
real rank, and its text holds no control character.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import atheris

import common  # noqa: F401 - puts the repository on sys.path

with atheris.instrument_imports(include=["ddpdoctor"]):
    from ddpdoctor.analysis.load.run_dirs import load_job
    from ddpdoctor.errors import UserError
    from ddpdoctor.rundir.bounded import check_bounds  # noqa: F401 - instrumented
    from ddpdoctor.trace import layout as L
    from ddpdoctor.trace.world import RANKS_PER_TRACE
    from ddpdoctor.trace.writer import TraceWriter

RUN = Path(tempfile.mkdtemp(prefix="fuzz-run-dir-", dir="/dev/shm"))
FILES = ("run.json", "facts.json", "lint.json", "supervisor.jsonl", "node.json", "stacks/pid-1.json")


def _one_rank() -> int:
    (RUN / "traces").mkdir()
    (RUN / "stacks").mkdir()
    w = TraceWriter(RUN / "traces", "fuzz", capacity=16)
    w.set_identity(0, 1, 0)
    w.meta("group", index=0, name="0", ranks=[0])
    h = w.append(int(L.RecordKind.COLLECTIVE), L.OP_CODES["all_reduce"], 1, 0, 0, 0, 1000, 0,
                 4, -1, 0, 0, -1, b"4|-|float32|x.py:1|")
    w.set_end(h, 2000)
    w.close()
    return w.pid


PID = _one_rank()
STACK = f"stacks/pid-{PID}.json"


def one_input(data: bytes) -> None:
    if not data:
        return
    name = FILES[data[0] % len(FILES)].replace("stacks/pid-1.json", STACK)
    path = RUN / name
    path.write_bytes(data[1:])
    try:
        job = load_job([RUN])
    except UserError as e:
        assert "\n" not in str(e), str(e)
        return
    finally:
        path.unlink()
    assert all(r < RANKS_PER_TRACE * max(1, len(job.ranks)) for r in job.ranks), \
        sorted(job.ranks)[-3:]
    common.assert_safe_text([job.command, job.problems])
    for run in job.ranks.values():
        common.assert_safe_text([run.stack, run.stack_error])


if __name__ == "__main__":
    atheris.Setup(common.argv(), one_input)
    atheris.Fuzz()
