"""Where torch flight recorder dumps and the requests for them sit in a run dir, named as torch
names them."""

from __future__ import annotations

from pathlib import Path

DUMP_DIR = "flight_recorder"  # RUN_DIR/flight_recorder/nccl_trace_rank_<rank>
# torch's own name for a dump (TORCH_FR_DUMP_TEMP_FILE's default, /tmp/nccl_trace_rank_, with
# the rank appended) and its format (a pickle): torch's `torchfrtrace DIR` reads the dir.
# Run dirs before this held fr-rank-<rank>.json (JSON): still read.
DUMP_PREFIX = "nccl_trace_rank_"
REQUEST = "dump-request"  # RUN_DIR/flight_recorder/dump-request: its change asks for dumps
# The variables torch sizes the flight recorder by, in the order it prefers them (it reads
# both; TORCH_NCCL_TRACE_BUFFER_SIZE is the older name).
BUFFER_ENVS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
DEFAULT_BUFFER_SIZE = "2000"  # under `ddpdoctor run`, unless the user set either variable


def dump_dir(run_dir: Path) -> Path:
    return run_dir / DUMP_DIR


def dump_path(run_dir: Path, rank: int) -> Path:
    return dump_dir(run_dir) / f"{DUMP_PREFIX}{rank}"


def request_path(run_dir: Path) -> Path:
    return dump_dir(run_dir) / REQUEST
