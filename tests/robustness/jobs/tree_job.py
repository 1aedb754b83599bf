"""A two-rank job with a process tree: each rank has a DataLoader worker (num_workers=1) and a
grandchild (`sleep 3600` in a session of its own, so no process-group signal reaches it).  Every pid is written to PID_DIR/<what>-<rank>.pid.

MODE: long (trains until SECONDS pass), hang (rank 1's worker deadlocks in __getitem__ at step 3:
rank 0 waits in all_reduce), crash (rank 1 raises at step 3), abort (rank 1 SIGABRTs itself at
step 3 while rank 0 waits, as gloo does after a mismatch), hang_later (both train for STEPS
steps, then rank 1 blocks as in hang).  STEP_SLEEP seconds between steps (0.05).
"""

import datetime
import os
import subprocess
import threading
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

MODE = os.environ.get("MODE", "long")
PID_DIR = os.environ["PID_DIR"]
STEP_SLEEP = float(os.environ.get("STEP_SLEEP", "0.05"))
STEPS = int(os.environ.get("STEPS", "3"))


def note_pid(what: str, rank: int, pid: int) -> None:
    with open(os.path.join(PID_DIR, f"{what}-{rank}.pid"), "w") as f:
        f.write(str(pid))


class Numbers(Dataset):
    def __init__(self, rank: int, block_at: int | None):
        self.rank, self.block_at = rank, block_at

    def __len__(self) -> int:
        return 100000

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.block_at is not None and i >= self.block_at:
            threading.Event().wait()  # the worker deadlocks (a lock nobody releases): its
            # rank never gets the batch (a timed sleep would be a slow sample, not a hang)
        return torch.full((4,), float(i))


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank = dist.get_rank()
    note_pid("rank", rank, os.getpid())
    child = subprocess.Popen(["sleep", "3600"], start_new_session=True)  # out of every group
    note_pid("grandchild", rank, child.pid)
    blocks = rank == 1 and MODE in ("hang", "hang_later")
    block_at = (3 if MODE == "hang" else STEPS) if blocks else None
    loader = DataLoader(Numbers(rank, block_at), batch_size=1, num_workers=1,
                        worker_init_fn=lambda _: note_pid("worker", rank, os.getpid()))
    deadline = time.monotonic() + float(os.environ.get("SECONDS", "120"))
    for step, batch in enumerate(loader):
        if step == 3 and rank == 1 and MODE == "crash":
            raise RuntimeError("rank 1 breaks at step 3")
        if step == 3 and rank == 1 and MODE == "abort":
            time.sleep(1.0)  # rank 0 is inside the all_reduce by now
            os.abort()
        dist.all_reduce(batch)
        time.sleep(STEP_SLEEP)
        if MODE == "long" and time.monotonic() > deadline:
            break
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
