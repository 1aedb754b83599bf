"""Where torch flight recorder dumps and the requests for them sit in a run dir."""

from __future__ import annotations

from pathlib import Path

DUMP_DIR = "flight_recorder"  # RUN_DIR/flight_recorder/fr-rank-<rank>.json
REQUEST = "dump-request"  # RUN_DIR/flight_recorder/dump-request: its change asks for dumps
# The variables torch sizes the flight recorder by, in the order it prefers them (it reads
# both; TORCH_NCCL_TRACE_BUFFER_SIZE is the older name).
BUFFER_ENVS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
DEFAULT_BUFFER_SIZE = "2000"  # under `ddpdoctor run`, unless the user set either variable


def dump_dir(run_dir: Path) -> Path:
    return run_dir / DUMP_DIR


def dump_path(run_dir: Path, rank: int) -> Path:
    return dump_dir(run_dir) / f"fr-rank-{rank}.json"


def request_path(run_dir: Path) -> Path:
    return dump_dir(run_dir) / REQUEST
