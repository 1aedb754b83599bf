"""Stop a job from outside it: every process started with a mark in its environment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from ddpdoctor.proc.control import JobTree, StopResult, stop_tree
from ddpdoctor.proc.table import scan, with_environ

REAP_GRACE_S = 3.0  # between SIGTERM and SIGKILL


def stop_marked(mark: str, grace: float = REAP_GRACE_S) -> StopResult:
    """Stop every process whose environment at exec held ``mark`` (``NAME=value``), and
    every process below one, as the job's supervisor would: its launchers (the marked
    processes whose parent is not marked) frozen first, so that none of them acts on its
    workers' deaths, then SIGTERM, ``grace`` seconds, SIGKILL.  This process is spared."""
    table = scan()
    marked = with_environ(table, mark)
    job = marked - {os.getpid()}
    launchers = [pid for pid in job if table[pid].ppid not in marked]
    return stop_tree(JobTree(tuple(sorted(job)), session=False), grace, quiet=launchers)


def start_reaper(mark: str, grace: float = REAP_GRACE_S, keep_fd: int = -1) -> bool:
    """Run ``stop_marked`` in a process of its own: in a session of its own and without
    the mark, so that no launcher's reaction to the first signal ends it half-way; it
    holds ``keep_fd`` (a lock, say) until it is done.  False when it could not be started
    (the caller then stops the job itself)."""
    name = mark.split("=", 1)[0]
    env = {k: v for k, v in os.environ.items() if k != name}
    if not sys.executable:
        return False
    try:
        subprocess.Popen([sys.executable, "-m", "ddpdoctor.proc.reaper", mark,
                          "--grace", f"{grace:g}"], env=env, start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, close_fds=True,
                         pass_fds=(keep_fd,) if keep_fd >= 0 else ())
    except (OSError, ValueError):
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m ddpdoctor.proc.reaper",
                                     description=stop_marked.__doc__)
    parser.add_argument("mark", help="NAME=value in the environment of the job's processes")
    parser.add_argument("--grace", type=float, default=REAP_GRACE_S)
    args = parser.parse_args(argv)
    if "=" not in args.mark:
        parser.error("the mark is NAME=value")
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the job's terminal may go with the job
    stop_marked(args.mark, args.grace)
    return 0


if __name__ == "__main__":
    sys.exit(main())
