"""Write each harness's seed corpus: a few valid inputs of each reader (then the fuzzers grow
their corpus from them; ``run_all.py`` keeps a minimised one, small, in ``corpus/``).

    python bench/fuzz/seeds.py            # into bench/fuzz/corpus/<harness>/seed-*
"""

from __future__ import annotations

import base64
import json
import shutil
import tempfile
from pathlib import Path

import common  # noqa: F401 - puts the repository on sys.path
from ddpdoctor.supervisor.node_auth import body_of
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.writer import TraceWriter

CORPUS = Path(__file__).resolve().parent / "corpus"
REPORTS = common.ROOT / "tests" / "fixtures"


def _ring() -> tuple[bytes, bytes]:
    folder = Path(tempfile.mkdtemp(prefix="fuzz-seed-"))
    try:
        w = TraceWriter(folder, "seed", capacity=8)
        w.set_identity(1, 2, 1)
        w.meta("group", index=0, name="0", ranks=[0, 1])
        w.meta("exception", type="ValueError", message="bad\nvalue", traceback=[])
        w.meta("flow_site", site=0, file="train.py", line=5, col=4, func="main",
               op="POP_JUMP_IF_FALSE", names=["rank"], fall=6, jump=9)
        w.meta("flow_values", site=0, way=1, after=[0, 0], segment=0, values={"rank": "1"})
        w.append(int(L.RecordKind.PATH), 0, 0, 0, 0, -1, 900, 950, 2, 0, 0, 0, 0,
                 b"|||0.1.0,1.0.1")
        for i, site in enumerate(["train.py:12", "train.py:13|torch/x.py:9|b"]):
            h = w.append(int(L.RecordKind.COLLECTIVE), L.OP_CODES["all_reduce"], 1, 0, 0, i,
                         1000 + i, 0, 4, -1, 0, 0, -1, f"4|-|float32|{site}".encode())
            w.set_end(h, 2000 + i)
        w.close()
        return w.ring_path.read_bytes(), w.meta_path.read_bytes()
    finally:
        shutil.rmtree(folder)


def _dump() -> bytes:
    entries = [{"collective_seq_id": s, "p2p_seq_id": 0, "is_p2p": False,
                "profiling_name": "gloo:all_reduce", "input_sizes": [[10]],
                "output_sizes": [[10]], "input_dtypes": ["Float"], "pg_id": 0,
                "process_group": ["0", "default_pg"], "record_id": s - 1, "retired": True,
                "state": "scheduled", "time_created_ns": 1000 * s} for s in (1, 2)]
    return json.dumps({"version": "2.10", "rank": 0,
                       "pg_config": {"": {"ranks": "[0, 1]"}, "1": {"ranks": [0]}},
                       "pg_status": {"0": {"last_completed_collective": "1"}},
                       "entries": entries}).encode()


def seeds() -> dict[str, list[bytes]]:
    ring, meta = _ring()
    small_ring = ring[:L.HEADER_SIZE + 3 * L.RECORD_SIZE]  # header + the slots used
    delta = {"rings": [{"name": "traces/pid-7.ring", "capacity": 4,
                        "header": base64.b64encode(ring[:L.HEADER_USED]).decode(),
                        "records": [[0, base64.b64encode(ring[L.HEADER_SIZE:L.HEADER_SIZE +
                                                               L.RECORD_SIZE]).decode()]]}],
             "files": [{"name": "traces/pid-7.meta.jsonl", "offset": 0,
                        "data": base64.b64encode(meta).decode()},
                       {"name": "run.json", "data": base64.b64encode(b"{}").decode()}]}
    report = {"t": 1, "host": "h", "attempt": 0, "delta": delta, "acks": [1],
              "ranks": [0, 1], "progress": {"0": {"progress_ns": 5, "cpu_busy": True}}}
    return {
        "trace": [small_ring + b"\n#meta#\n" + meta, small_ring, meta],
        "dump": [_dump()],
        "report": [p.read_bytes() for p in sorted(REPORTS.rglob("*.json"))[:3]],
        "frames": [bytes([3]) + body_of("report", report),
                   bytes([3]) + body_of("verdict", {"reason": "hang", "message": "m",
                                                    "stop": True, "exit_code": 124}),
                   bytes([3]) + body_of("ask", {"n": 1, "ranks": [0]}),
                   bytes([0]) + (12).to_bytes(4, "big") + body_of("beat", {"t": 1})[:12]],
        "run_dir": [bytes([0]) + json.dumps({"command": ["train.py"], "hang_timeout": 5,
                                             "started_at": "2026-01-01T00:00:00"}).encode(),
                    bytes([1]) + json.dumps({"ranks": [{"rank": 0, "world_size": 1, "pid": 1,
                                                        "host": "h", "calls": []}]}).encode(),
                    bytes([2]) + json.dumps([{"kind": "rank_dependent_collective",
                                              "file": "x.py", "line": 1}]).encode(),
                    bytes([3]) + b'{"event": "stop", "t": 5}\n',
                    bytes([5]) + json.dumps({"frames": [{"name": "f", "filename": "x.py",
                                                         "line": 1}]}).encode()],
    }


def main() -> None:
    for harness, items in seeds().items():
        folder = CORPUS / harness
        folder.mkdir(parents=True, exist_ok=True)
        for n, data in enumerate(items):
            (folder / f"seed-{n}").write_bytes(data)
        print(f"{harness}: {len(items)} seed(s)")


if __name__ == "__main__":
    main()
