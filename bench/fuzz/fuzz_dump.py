"""Fuzz the flight recorder dump reader: a JSON dump's bytes, as a hostile directory holds them.

    nice -n 10 python bench/fuzz/fuzz_dump.py bench/fuzz/corpus/dump -max_total_time=600

The reader may refuse a dump (UserError: a one-line error, exit 2) and must not raise
anything else; a dump it takes names ranks within the cap a job of one dump allows, and its
group and op names hold no control character.
"""

from __future__ import annotations

from pathlib import Path

import atheris

import common  # noqa: F401 - puts the repository on sys.path

with atheris.instrument_imports(include=["ddpdoctor"]):
    from ddpdoctor.analysis.load.fr_dumps import dump_of, rank_runs
    from ddpdoctor.errors import UserError
    from ddpdoctor.trace.world import RANKS_PER_TRACE

PATH = Path("fr-0")


def one_input(data: bytes) -> None:
    try:
        dump = dump_of(data, PATH)
        runs, world = rank_runs([dump])
    except UserError as e:
        assert "\n" not in str(e), str(e)
        return
    assert world <= RANKS_PER_TRACE
    for group, calls in dump.calls.items():
        common.assert_safe_text([group, *(c.op for c in calls[:64]),
                                 *(d for c in calls[:64] for d in c.dtypes)])
    assert all(max(m) < RANKS_PER_TRACE for m in dump.group_ranks.values())


if __name__ == "__main__":
    atheris.Setup(common.argv(), one_input)
    atheris.Fuzz()
