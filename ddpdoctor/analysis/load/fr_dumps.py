"""Read torch flight recorder dumps (JSON) as untrusted input: each rank's Calls, one list per process group.

torch keeps the flight recorder with ``TORCH_FR_BUFFER_SIZE=N``; a rank writes its entries
with ``torch._C._distributed_c10d._dump_fr_trace_json(True, False)``.  Each entry has the
process group, ``collective_seq_id`` (from 1), the op (``profiling_name``, e.g.
``gloo:all_reduce``), sizes, dtypes, state and timestamps.  On gloo the state stays
``scheduled``: completion shows as ``retired`` or a seq at or below the group's
``last_completed_collective``; on NCCL ``state`` says completed and times are measured.
torch's own pickle dumps (``_dump_fr_trace``, named ``<prefix><rank>``) are decoded as plain
data (trace/fr_pickle.py), never unpickled.  A dump is untrusted input: a
regular file only, its size checked before reading, its JSON bounded (rundir.bounded), the
ranks it names capped as a trace header's are (a world past ``RANKS_PER_TRACE`` ranks per
dump present is not believed): a bad dump is a one-line error, exit 2.  How dumps join a
run dir's traces: flight_recorder.py.
"""

from __future__ import annotations

import os
import re
import socket
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddpdoctor.analysis.load.external import DEFAULT_GROUP, external_run
from ddpdoctor.analysis.model import Call, RankRun
from ddpdoctor.errors import UserError
from ddpdoctor.rundir.bounded import BadInput, load_json, open_regular, read_file
from ddpdoctor.trace import fr_pickle
from ddpdoctor.trace import layout as L
from ddpdoctor.trace.text import clean
from ddpdoctor.trace.world import RANKS_PER_TRACE

MAX_DUMP_BYTES = 256 << 20
PICKLE_MAGIC = b"\x80"
DTYPES = {"Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16",
          "Long": "int64", "Int": "int32", "Short": "int16", "Char": "int8", "Byte": "uint8",
          "Bool": "bool", "ComplexFloat": "complex64", "ComplexDouble": "complex128"}
OPS = {"allreduce": "all_reduce", "allgather": "all_gather", "_allgather_base":
       "_all_gather_base", "allgather_into_tensor_coalesced": "all_gather_into_tensor",
       "reduce_scatter_tensor_coalesced": "reduce_scatter_tensor", "alltoall": "all_to_all",
       "alltoall_base": "all_to_all_single", "allreduce_coalesced": "all_reduce_coalesced"}
P2P_OPS = ("send", "recv")
NO_CALLSITE = "unknown (flight recorder)"  # a dump has no Python frames on gloo
MAX_RANK = 1 << 20
EXIT_BAD_INPUT = 2
NOTHING_PENDING = ("the flight recorder dumps show no collective pending on any rank: from "
                   "them alone it cannot be told whether the job hung outside its "
                   "collectives, ran on or ended")
TRAILING_RANK = re.compile(r"(\d+)(\.json)?$")


@dataclass(frozen=True)
class FlightRecorderDump:
    """One rank's dump: its calls by group name, and the group members it names."""

    path: Path
    rank: int
    calls: dict[str, list[Call]]
    group_ranks: dict[str, list[int]]
    version: str


def _head(path: Path, size: int) -> bytes:
    """The first ``size`` bytes of regular file ``path`` (b"" when it cannot be read);
    BadInput when it is no regular file (a FIFO would hang the reader)."""
    try:
        fd = open_regular(path)
    except FileNotFoundError:
        return b""
    except OSError:
        return b""
    try:
        return os.read(fd, size)
    except OSError:
        return b""
    finally:
        os.close(fd)


def is_pickle(path: Path) -> bool:
    return _head(path, 1) == PICKLE_MAGIC


def dump_files(directory: Path) -> list[Path]:
    """The files of a directory that are flight recorder dumps (JSON or pickle); others
    (a report written beside them, the dump request, a subdirectory) are left alone; a
    link, FIFO, socket or device there is a BadInput (exit 2): no dump is any of those."""
    try:
        names = sorted(n for n in os.listdir(directory) if not n.startswith("."))
    except OSError:
        return []
    files = []
    for name in names:
        path = directory / name
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            continue
        if stat.S_ISREG(mode):
            files.append(path)
        elif not stat.S_ISDIR(mode):
            open_regular(path)  # raises BadInput, naming what it is
    return [p for p in files if is_pickle(p) or _looks_like_json_dump(p)]


def is_dump_dir(directory: Path) -> bool:
    """Does ``directory`` hold torch flight recorder dumps?"""
    return bool(dump_files(directory))


def _looks_like_json_dump(path: Path) -> bool:
    head = _head(path, 4096)
    return head.lstrip().startswith(b"{") and (b'"entries"' in head or b'"pg_status"' in head
                                               or b'"version"' in head)


def _op(profiling_name: str) -> tuple[str, int]:
    """``"gloo:all_reduce"`` -> ("all_reduce", -1); ``"nccl:send 0->1"`` -> ("send", 1)."""
    name = profiling_name.split(":", 1)[-1].strip()
    base, _, tail = name.partition(" ")
    peer = -1
    m = re.search(r"(\d+)\s*(->|<-)\s*(\d+)", tail)
    if m:
        peer = int(m.group(3))
    return OPS.get(base, base) or "unknown", peer


def _shapes(value: Any) -> tuple[tuple[int, ...], ...]:
    if not isinstance(value, list):
        return ()
    return tuple(tuple(int(d) for d in s if isinstance(d, int)) for s in value
                 if isinstance(s, list))


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an infinite float
        return default


def _members(config: Any, path: Path) -> list[int] | None:
    """A group's member ranks as the dump lists them (a JSON list, or its text); a rank
    beyond any job is a BadInput."""
    ranks = config.get("ranks") if isinstance(config, dict) else None
    if isinstance(ranks, str):
        if len(ranks) > 16 * MAX_RANK:
            raise BadInput(f"flight recorder dump {path} lists a group of more than "
                           f"{MAX_RANK:,} ranks: not read")
        try:
            ranks = load_json(ranks.encode(), path)
        except BadInput:
            return None
    if not isinstance(ranks, list) or not ranks or \
            not all(type(r) is int for r in ranks):
        return None
    if len(ranks) > MAX_RANK or not all(0 <= r < MAX_RANK for r in ranks):
        raise BadInput(f"flight recorder dump {path} names a group member beyond any job "
                       f"(ranks 0 to {MAX_RANK - 1:,}): not read")
    return ranks


def _rank_of(path: Path, data: dict[str, Any]) -> int:
    rank = data.get("rank")
    if type(rank) is not int:
        m = TRAILING_RANK.search(path.name)
        if m is None:
            raise UserError(f"cannot tell the rank of flight recorder dump {path}: name it "
                            "<prefix><rank> as torch does (e.g. fr-trace-0)", EXIT_BAD_INPUT)
        rank = int(m.group(1))
    if not 0 <= rank < MAX_RANK:
        raise UserError(f"flight recorder dump {path} names rank {rank}, beyond any job",
                        EXIT_BAD_INPUT)
    return rank


def entry_call(rank: int, entry: dict[str, Any], last_completed: int) -> tuple[str, Call]:
    """(group name, Call) of one dump entry; seq counts from 0 as ddpdoctor's traces do."""
    pg = entry.get("process_group")
    group = clean(str(pg[0]) if isinstance(pg, (list, tuple)) and pg
                  else str(entry.get("pg_id", 0)))
    op, peer = _op(clean(str(entry.get("profiling_name", ""))[:256]))
    p2p = bool(entry.get("is_p2p")) or op in P2P_OPS
    seq_id = _int(entry.get("p2p_seq_id" if p2p else "collective_seq_id"))
    done = bool(entry.get("retired")) or entry.get("state") == "completed" or \
        (not p2p and 0 < seq_id <= last_completed)
    t_start = _int(entry.get("time_discovered_started_ns")) or \
        _int(entry.get("time_created_ns"))
    t_end = _int(entry.get("time_discovered_completed_ns")) or (t_start + 1 if done else 0)
    raw_dtypes = entry.get("input_dtypes")
    dtypes = tuple(DTYPES.get(d, clean(d[:64]).lower())
                   for d in (raw_dtypes if isinstance(raw_dtypes, list) else [])
                   if isinstance(d, str))
    kind = L.RecordKind.P2P if p2p else L.RecordKind.COLLECTIVE
    call = Call(rank=rank, group=group, seq=max(seq_id - 1, 0), op=op,
                in_shapes=_shapes(entry.get("input_sizes")),
                out_shapes=_shapes(entry.get("output_sizes")), dtypes=dtypes, peer=peer,
                callsite=NO_CALLSITE, t_start=t_start, t_end=t_end if done else 0,
                aux=_int(entry.get("record_id"), -1), kind=kind)
    return group, call


def load_dump(path: Path) -> FlightRecorderDump:
    """Read one JSON dump.  Raises UserError (exit 2) for pickle, corrupt, foreign or
    hostile files (rundir.bounded: regular, sized, bounded JSON)."""
    try:
        raw = read_file(path, MAX_DUMP_BYTES)
    except BadInput as e:
        raise BadInput(f"flight recorder dump {e}") from None
    except OSError as e:
        raise UserError(f"cannot read flight recorder dump {path}: {e.strerror or e}",
                        EXIT_BAD_INPUT) from None
    return dump_of(raw, path)


def dump_of(raw: bytes, path: Path) -> FlightRecorderDump:
    """The dump in ``raw`` (the bytes of ``path``: JSON, or torch's pickle of plain data); a
    UserError (exit 2) when it is no dump or an out-of-bounds one."""
    try:
        data = fr_pickle.decode(raw, str(path)) if raw[:1] == PICKLE_MAGIC else \
            load_json(raw, path)
    except fr_pickle.NotPlainData as e:
        raise UserError(f"flight recorder dump {e}", EXIT_BAD_INPUT) from None
    except BadInput as e:
        raise UserError(f"flight recorder dump {e}", EXIT_BAD_INPUT) from None
    if not isinstance(data, dict) or not isinstance(data.get("entries", []), list):
        raise UserError(f"{path} is not a torch flight recorder dump (no entries list)",
                        EXIT_BAD_INPUT)
    rank = _rank_of(path, data)
    status = data.get("pg_status") if isinstance(data.get("pg_status"), dict) else {}
    completed = {str(k): _int(v.get("last_completed_collective"), -1)
                 for k, v in status.items() if isinstance(v, dict)}
    calls: dict[str, list[Call]] = {}
    for entry in data.get("entries", []):
        if not isinstance(entry, dict):
            continue
        pg = str(entry.get("pg_id", 0))
        group, call = entry_call(rank, entry, completed.get(pg, -1))
        calls.setdefault(group, []).append(call)
    group_ranks: dict[str, list[int]] = {}
    configs = data.get("pg_config") if isinstance(data.get("pg_config"), dict) else {}
    for name, config in configs.items():
        members = _members(config, path)
        if members is not None:
            group_ranks[clean(str(name)) or DEFAULT_GROUP] = members
    return FlightRecorderDump(path, rank, calls, group_ranks,
                              clean(str(data.get("version", ""))[:64]))


def load_dump_dir(directory: Path) -> list[FlightRecorderDump]:
    """Every dump of a directory, one per rank (the newest file of a rank wins)."""
    dumps: dict[int, FlightRecorderDump] = {}
    for path in dump_files(directory):
        dump = load_dump(path)
        old = dumps.get(dump.rank)
        if old is None or old.path.stat().st_mtime <= path.stat().st_mtime:
            dumps[dump.rank] = dump
    if not dumps:
        raise UserError(f"no flight recorder dump in {directory}", EXIT_BAD_INPUT)
    return [dumps[r] for r in sorted(dumps)]


def dumps_alone(run: RankRun) -> bool:
    """Is the rank known from a flight recorder dump alone (no process, no stack, no trace of
    its own)?  Then nothing tells what it does outside its calls."""
    return run.header.pid < 0 and run.stack is None and run.stack_error is None and \
        run.cpu_busy is None and run.progress_ns is None


def written_ns(dumps: list[FlightRecorderDump]) -> int:
    """When the dumps were written, as their files tell (the oldest file's time: a dump
    holds no time of its own), never before their newest entry."""
    newest_entry = max((c.t_start for d in dumps for cs in d.calls.values() for c in cs),
                       default=0)
    times = []
    for d in dumps:
        try:
            times.append(d.path.stat().st_mtime_ns)
        except OSError:
            continue
    return max(min(times, default=0), newest_entry)


def rank_runs(dumps: list[FlightRecorderDump]) -> tuple[dict[int, RankRun], int]:
    """RankRuns of the dumps' ranks and the world size they imply: believed, as a trace
    header's, up to ``RANKS_PER_TRACE`` ranks per dump present; a dump that names a rank
    beyond that (itself or a group's member) is a BadInput, exit 2."""
    cap = RANKS_PER_TRACE * len(dumps)
    world = max(d.rank for d in dumps) + 1
    for d in dumps:
        named = max([d.rank, *(max(m) for m in d.group_ranks.values())])
        if named >= cap:
            raise BadInput(f"flight recorder dump {d.path} names rank {named:,}, beyond a job "
                           f"of {len(dumps)} dump(s) (at most {cap:,} ranks): not read")
        members = d.group_ranks.get(DEFAULT_GROUP)
        if members:
            world = max(world, len(members), max(members) + 1)
    host = socket.gethostname()
    runs = {}
    everyone = list(range(world))  # one list, shared by every group that names no members
    for d in dumps:
        group_ranks = {g: everyone for g in d.calls} | {DEFAULT_GROUP: everyone}
        group_ranks.update({g: m for g, m in d.group_ranks.items() if g != DEFAULT_GROUP})
        runs[d.rank] = external_run(d.rank, world, -1, host, d.path, d.calls, group_ranks)
    return runs, world
