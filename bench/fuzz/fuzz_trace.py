"""Fuzz the trace reader: a ring's bytes and its meta log's, as a hostile run dir holds them.

    nice -n 10 python bench/fuzz/fuzz_trace.py bench/fuzz/corpus/trace -max_total_time=600

An input is a ring and a meta log (split at the first ``\\n#meta#\\n``).  The reader may refuse
the ring (TraceError) and must not raise anything else; what it hands on (call sites, ops,
groups, dtypes, host, meta events) holds no control character, the world size the headers
make believable stays within what the traces present allow, and the rank's recorded path
(its flow records and sites) is read without an exception.
"""

from __future__ import annotations

from pathlib import Path

import atheris

import common  # noqa: F401 - puts the repository on sys.path

with atheris.instrument_imports(include=["ddpdoctor"]):
    from ddpdoctor.analysis.load.flow import rank_flow
    from ddpdoctor.trace.reader import TraceError, parse_meta, trace_of
    from ddpdoctor.trace.world import RANKS_PER_TRACE, world_size

SPLIT = b"\n#meta#\n"
PATH = Path("pid-1.ring")


def one_input(data: bytes) -> None:
    ring, _, meta = data.partition(SPLIT)
    events, problems = parse_meta(meta, "pid-1.meta.jsonl")
    common.assert_safe_text(events)
    try:
        trace = trace_of(ring, PATH, events, problems)
    except TraceError:
        return
    h = trace.header
    common.assert_safe_text([h.host, h.run_id])
    for r in trace.records[:64]:
        common.assert_safe_text([r.callsite, r.framework_site, r.op, r.group, *r.dtypes])
    assert world_size([(h.rank, h.world_size)]) <= RANKS_PER_TRACE
    common.assert_safe_text(trace.group_names())
    rank_flow(trace.records, trace.meta, trace.group_names())  # the rank's recorded path


if __name__ == "__main__":
    atheris.Setup(common.argv(), one_input)
    atheris.Fuzz()
