"""Rank 0 writes a checkpoint slowly (64 KiB, fsync, a pause; little CPU, no collective) for
WRITE_S seconds while rank 1 waits in a barrier: slow storage, a straggler, not a hang.
HOW=waits: instead, rank 0 retries the save with short sleeps for WRITE_S seconds, then
waits WRITE_S seconds on an upload command (``sleep``, its output captured): waits it chose,
no CPU, no I/O."""

import os
import subprocess
import time
from pathlib import Path

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
dist.all_reduce(torch.ones(10))
if rank == 0 and os.environ.get("HOW") == "waits":
    end = time.monotonic() + float(os.environ.get("WRITE_S", "8"))
    while not os.path.exists(Path(os.environ["CKPT_DIR"]) / "ckpt.bin"):
        time.sleep(0.5)  # the store is not ready: try again
        if time.monotonic() > end:
            (Path(os.environ["CKPT_DIR"]) / "ckpt.bin").write_bytes(b"x" * 4096)
    subprocess.run(["sleep", os.environ.get("WRITE_S", "8")], capture_output=True, check=True)
elif rank == 0:
    chunk = os.urandom(64 << 10)
    end = time.monotonic() + float(os.environ.get("WRITE_S", "8"))
    with open(Path(os.environ["CKPT_DIR"]) / "ckpt.bin", "wb") as f:
        while time.monotonic() < end:
            f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
            time.sleep(0.05)
dist.barrier()
dist.all_reduce(torch.ones(10))
print(f"rank {rank} done", flush=True)
dist.destroy_process_group()
