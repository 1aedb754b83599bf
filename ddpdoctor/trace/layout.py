"""Binary layout of a rank's trace file: a fixed header and a ring of fixed-size records.

A trace file is ``HEADER_SIZE`` bytes of header followed by ``capacity`` records of
``RECORD_SIZE`` bytes.  Record ``i`` (counted from 0 since the process started) lives in
slot ``i % capacity``.  The writer fills a record and stores ``commit = i + 1`` last, so a
reader that sees ``commit != i + 1`` knows the slot is torn or overwritten and skips it.
The file is mmap'd shared: every record written survives the process being SIGKILLed.
"""

from __future__ import annotations

import enum
import struct

MAGIC = b"DDPDTRC1"
VERSION = 1
HEADER_SIZE = 4096
RECORD_SIZE = 256
DEFAULT_CAPACITY = 32768  # 8 MiB a rank at most: disk reserved as records come (writer.py)

# Header: magic, version, record_size, capacity, pid, rank, world_size, local_rank, state,
# exit_code, step, epoch, count, heartbeat_ns, last_seq, started_ns, host, run_id
HEADER = struct.Struct("<8sIIIiiiiii qqqqqq 64s 32s")
HEADER_FIELDS = (
    "magic", "version", "record_size", "capacity", "pid", "rank", "world_size",
    "local_rank", "state", "exit_code", "step", "epoch", "count", "heartbeat_ns",
    "last_seq", "started_ns", "host", "run_id",
)
# Offsets of header fields the writer updates in place.
OFF_RANK = 24
OFF_WORLD = 28
OFF_LOCAL_RANK = 32
OFF_STATE = 36
OFF_EXIT_CODE = 40
OFF_STEP = 44
OFF_EPOCH = 52
OFF_COUNT = 60
OFF_HEARTBEAT = 68
OFF_LAST_SEQ = 76
assert HEADER.size <= HEADER_SIZE

# Loader progress, in the header after the fields above: LOADER_SLOTS slots, one per loader
# epoch (the process's newest ones), each loader id, epoch, batches drawn and the wall time
# of the last batch (ns).  The data probes record only an epoch's first batches and keep
# the count of the others here (runtime/batch_counts.py), so the table, not the records,
# says how far a rank that hangs or is killed got.  A slot whose batch count is <= 0 is
# empty (older traces have zeros here).
OFF_LOADERS = 1024
LOADER_SLOT = struct.Struct("<qqqq")
LOADER_SLOTS = 32
HEADER_USED = OFF_LOADERS + LOADER_SLOTS * LOADER_SLOT.size  # what a header copy must keep
assert HEADER.size <= OFF_LOADERS and HEADER_USED <= HEADER_SIZE

# Record: commit, kind, op, reduce_op, flags, group, seq, t_start, t_end, numel, peer,
# aux, nbytes, parent, text.  text is "in_shapes|out_shapes|dtypes|callsite" for
# collectives, with "|framework_site" appended when a framework frame made the call.
RECORD = struct.Struct("<qBBBBiqqqqiiqq184s")
RECORD_FIELDS = (
    "commit", "kind", "op", "reduce_op", "flags", "group", "seq", "t_start", "t_end",
    "numel", "peer", "aux", "nbytes", "parent", "text",
)
OFF_REC_T_END = 32  # where t_end sits inside a record, patched when the call returns
TEXT_SIZE = 184
assert RECORD.size == RECORD_SIZE


class RankState(enum.IntEnum):
    """What a rank is doing, as the rank itself says in its header.

    STARTING -> COMPUTING -> EXITED | FAILED.  Being inside a collective is not written
    here (it would cost every call two more writes): a record with no end time says it.
    "Waiting" and "hung" are derived by the supervisor by comparing ranks and clocks.
    IN_COLLECTIVE stays reserved for older traces.
    """

    STARTING = 0
    COMPUTING = 1
    IN_COLLECTIVE = 2
    EXITED = 3
    FAILED = 4


class RecordKind(enum.IntEnum):
    """What a record describes."""

    COLLECTIVE = 1  # one collective call; seq counts per process group
    P2P = 2  # send/recv/isend/irecv; seq counts per (group, peer, direction)
    RING_STEP = 3  # one send/recv of a ring all-reduce; parent = the bucket's seq
    BATCH = 4  # one batch drawn from a DataLoader; seq = batch index, aux = epoch
    MARK = 5  # a free-form point in time (text says what)
    PATH = 6  # a segment of the rank's path through the user's code (trace/flow.py)


class RecordFlag(enum.IntFlag):
    """Bits of a record's ``flags``."""

    ASYNC = 1  # async_op=True: t_end is when Work.wait() returned
    BUCKET = 2  # a DDP gradient bucket; aux = bucket index
    FAILED = 4  # the call raised
    OBJECT = 8  # an *_object variant (pickled payload, shapes unknown up front)
    SEND = 16  # p2p / ring step direction: this rank sent
    RECV = 32  # p2p / ring step direction: this rank received


OPS = (
    "unknown", "all_reduce", "broadcast", "barrier", "all_gather", "all_gather_into_tensor",
    "reduce_scatter", "reduce_scatter_tensor", "reduce", "gather", "scatter", "all_to_all",
    "all_to_all_single", "send", "recv", "isend", "irecv", "batch_isend_irecv",
    "monitored_barrier", "all_gather_object", "broadcast_object_list", "gather_object",
    "scatter_object_list", "all_reduce_coalesced", "send_object_list", "recv_object_list",
    "ring_send", "ring_recv", "batch", "epoch", "step", "init", "new_group", "destroy",
    # append only: a record stores the index
    "all_gather_single", "reduce_scatter_single", "all_gather_coalesced",
    "_all_gather_base", "_reduce_scatter_base", "coalesced", "all_gather_into_tensor_coalesced",
    "reduce_scatter_tensor_coalesced",
)
OP_CODES = {name: code for code, name in enumerate(OPS)}

REDUCE_OPS = ("", "sum", "product", "min", "max", "band", "bor", "bxor", "avg",
              "premul_sum", "unused")
