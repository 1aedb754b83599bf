# ddpdoctor: launcher (lint reads the script named after it)
"""torchrun's single-node launch for the suite's many small jobs, with ranks forked from a
process that has imported torch already.

Why: every exec'd process of a job pays for ``import torch`` (about 1.3 s of CPU here) and
torch's DDP constructor for ``import torch._dynamo`` (1.1 s); torchrun's agent pays the
first again.  That is two thirds of a 2-rank catalogue job's CPU, and the catalogue runs
about a hundred such jobs.  This launcher pays them once per job.

What it is: ``python -u warm_torchrun.py --nproc-per-node N script.py [args]``.  Like
torchrun's agent it gives each worker RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
GROUP_RANK, the TORCHELASTIC_* variables and the agent's own TCPStore at
MASTER_ADDR:MASTER_PORT (OMP_NUM_THREADS=1 unless set); when a worker fails it sends the
others SIGTERM and, 30 s later, SIGKILL, and exits 1; SIGTERM, SIGINT and SIGHUP are passed
to the workers.  A worker runs the script as ``python script.py`` would (``runpy``, as
``__main__``, its absolute path as __file__, the script's directory first on sys.path;
only sys.argv[0] is absolute where Python keeps it as typed) and ends as a Python process
ends: an uncaught exception through sys.excepthook, then the atexit handlers (the flight
recorder's dump at exit, gloo's teardown) and the interpreter's finalization.

What was imported is frozen out of the garbage collector before the forks (``gc.freeze``,
as forking servers do): a worker's collections and its finalization then leave torch's
modules alone, about 0.8 s of CPU less per worker.  The script's own objects are collected
as anywhere.

Under ``ddpdoctor run`` the launcher is instrumented as torchrun's agent is (the bootstrap
runs at its start), reports its workers' exit statuses as the agent does, and each worker
starts its trace as an exec'd rank does at its start (``init_hooks.on_process_start``).
What it does not exercise: a rank's own interpreter start (the bootstrap, ``import torch``
under ddpdoctor's import hook), and ``ddpdoctor run``'s lint of the job's script (it lints
the first script of the command: this launcher).  The launch forms themselves run on
torchrun in their own tests (tests/integration/test_run.py, the compatibility suite).
"""

from __future__ import annotations

import gc
import os
import runpy
import signal
import socket
import sys
import time
import uuid

STOP_GRACE_S = 30.0  # torchrun's own: SIGTERM, then SIGKILL after this long
POLL_S = 0.1  # torchrun's default monitor interval
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _parse(argv: list[str]) -> tuple[int, str, list[str]]:
    nproc, i = 1, 0
    while i < len(argv) and argv[i].startswith("-"):
        name, _, value = argv[i].partition("=")
        if name in ("--nproc-per-node", "--nproc_per_node"):
            if not value:
                i += 1
                value = argv[i] if i < len(argv) else ""
            if not value.isdigit() or int(value) < 1:
                sys.exit(f"warm_torchrun: --nproc-per-node needs a positive number, not {value!r}")
            nproc = int(value)
        elif name != "--standalone":
            sys.exit(f"warm_torchrun: unknown option {argv[i]} (only --nproc-per-node)")
        i += 1
    if i >= len(argv):
        sys.exit("warm_torchrun: no script given")
    return nproc, argv[i], argv[i + 1:]


def _worker_env(local_rank: int, nproc: int, run_id: str) -> dict[str, str]:
    """What torchrun's agent sets for a worker of a one-node job (the port comes later)."""
    env = {name: str(local_rank) for name in ("RANK", "LOCAL_RANK", "ROLE_RANK")}
    env.update({name: str(nproc) for name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                              "ROLE_WORLD_SIZE")})
    env.update(GROUP_RANK="0", GROUP_WORLD_SIZE="1", ROLE_NAME="default",
               MASTER_ADDR="127.0.0.1", TORCHELASTIC_RUN_ID=run_id,
               TORCHELASTIC_RESTART_COUNT="0", TORCHELASTIC_MAX_RESTARTS="0",
               TORCHELASTIC_USE_AGENT_STORE="True", TORCH_NCCL_ASYNC_ERROR_HANDLING="1")
    return env


def _become_rank(env: dict[str, str], port_pipe: int, script: str, args: list[str]) -> None:
    """In the forked worker: wait for the store's port, take the worker's environment and
    signals, start its trace as an exec'd rank would, then run the script as __main__."""
    for sig in FORWARDED:
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with os.fdopen(port_pipe, "rb") as pipe:
        port = pipe.read().decode()
    if not port.isdigit():
        os._exit(1)  # the launcher failed before the store was up; it says why
    os.environ.update(env, MASTER_PORT=port)
    if os.environ.get("OMP_NUM_THREADS", "").isdigit():  # as a worker of torchrun gets it
        import torch

        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    if os.environ.get("DDPDOCTOR_RUN_DIR"):
        from ddpdoctor.runtime import attempt_dir, init_hooks

        attempt_dir.enter()
        init_hooks.on_process_start()
    path = os.path.abspath(script)  # as `python script.py` makes __file__ and co_filename
    sys.argv = [path, *args]
    sys.path[0] = os.path.dirname(path)
    runpy.run_path(path, run_name="__main__")


# a script that names one of these may build a DDP, whose constructor imports torch._dynamo
# (1.1 s of CPU): warmed here for it, left to the ranks of the others (a repro, say)
BUILDS_DDP = ("DistributedDataParallel", "DDP", "lightning", "accelerate", "ignite",
              "transformers")


def _builds_ddp(script: str) -> bool:
    try:
        with open(script, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return True
    return any(word in text for word in BUILDS_DDP)


def _warm_up(nproc: int, script: str) -> None:
    """Import what the ranks of the job will import, once, here (no thread may start).
    Only torch's own modules: a framework may read the rank from the environment as it
    is imported (Lightning does), so each rank imports those itself."""
    if nproc > 1:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch  # noqa: F401
    import torch.distributed  # noqa: F401
    import torch.nn.parallel  # noqa: F401
    import torch.utils.data  # noqa: F401

    if _builds_ddp(script):
        import torch._dynamo  # noqa: F401


def _agent_store() -> tuple[object, int]:
    """The agent's TCPStore on a free port of the loopback (the workers are its clients)."""
    from torch.distributed import TCPStore

    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    return store, store.port


def _record_exit(pid: int, code: int) -> None:
    if os.environ.get("DDPDOCTOR_RUN_DIR"):
        try:
            from ddpdoctor.runtime.process_hooks import record_child_exit

            record_child_exit(pid, code)
        except Exception:  # noqa: BLE001, S110 - the workers must still be waited for
            pass  # not instrumented, or the trace is broken: the exit goes unrecorded


class Workers:
    """The forked workers: their exits, a stop that reaches every one, torchrun's summary."""

    def __init__(self, pids: dict[int, int]):
        self.live = dict(pids)  # pid -> local rank
        self.first_failure: tuple[int, int, int] | None = None  # (rank, pid, exit code)
        self.kill_at: float | None = None

    def stop(self, sig: int) -> None:
        for pid in self.live:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        if self.kill_at is None:
            self.kill_at = time.monotonic() + STOP_GRACE_S

    def reap(self) -> None:
        while self.live:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.live.clear()
                return
            if pid == 0:
                return
            code = os.waitstatus_to_exitcode(status)
            rank = self.live.pop(pid, -1)
            _record_exit(pid, code)
            if code != 0 and self.first_failure is None:
                self.first_failure = (rank, pid, code)
                self.stop(signal.SIGTERM)

    def wait(self) -> None:
        while self.live:
            self.reap()
            if self.kill_at is not None and time.monotonic() > self.kill_at:
                self.stop(signal.SIGKILL)
            time.sleep(POLL_S)


def main() -> None:
    nproc, script, args = _parse(sys.argv[1:])
    if not os.path.isfile(script):
        sys.exit(f"warm_torchrun: script not found: {script}")
    _warm_up(nproc, script)
    gc.freeze()  # what was imported stays out of every later collection, here and in the workers
    run_id = uuid.uuid4().hex[:12]
    sys.stdout.flush()
    sys.stderr.flush()
    pids, pipes = {}, []
    for local_rank in range(nproc):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(write_end)
            for other in pipes:
                os.close(other)
            _become_rank(_worker_env(local_rank, nproc, run_id), read_end, script, args)
            return  # the script ended: this worker ends as `python script.py` would
        os.close(read_end)
        pipes.append(write_end)
        pids[pid] = local_rank
    workers = Workers(pids)
    for sig in FORWARDED:
        signal.signal(sig, lambda signum, frame: workers.stop(signum))
    try:
        _store, port = _agent_store()  # kept alive until the workers end
    except Exception as e:  # noqa: BLE001 - said in one line; the workers are told to end
        print(f"warm_torchrun: cannot start the agent's store: {e}", file=sys.stderr)
        port = None
    for pipe in pipes:
        os.write(pipe, str(port or "").encode())
        os.close(pipe)
    workers.wait()
    if workers.first_failure is not None:
        rank, pid, code = workers.first_failure
        print(f"warm_torchrun: {script} FAILED: rank {rank} (local_rank: {rank}) "
              f"exitcode {code} (pid: {pid}) on {socket.gethostname()}", file=sys.stderr)
        sys.exit(1)
    sys.exit(0 if port is not None else 1)


if __name__ == "__main__":
    main()
