"""A rank blocked outside any collective, using no CPU: os_blocked with what the OS says it
waits on (the supervisor's os_wait facts), not computing; and the /proc reading itself."""

from __future__ import annotations

import subprocess
import sys
import time

from ddpdoctor.analysis.causal.diagnose import diagnose
from ddpdoctor.analysis.causal.state import StateKind
from ddpdoctor.analysis.causal.verdict import HangVerdict, judge
from ddpdoctor.analysis.engine import analyze
from ddpdoctor.analysis.model import NS, Severity
from ddpdoctor.supervisor.os_wait import lock_holder, os_wait, syscall_name
from tests.unit.factory import NOW, T0, frame, job, rank, rec, steps

AGO = (NOW - T0) / NS


def flock_job(said_at: int = NOW - NS, live: bool = False):
    r0 = rank(0, steps(3) + [rec(3, t=AGO - 30, dur=None)], step=3)
    r1 = rank(1, steps(3), step=3, cpu_busy=False,
              stack=[frame("/x/train.py", 12, "checkpoint"), frame("/x/train.py", 40)])
    r1.progress_ns = r0.progress_ns = NOW - 30 * NS
    j = job([r0, r1], outcome=None if live else "hung", live=live)
    j.supervisor_events = [{"event": "os_wait", "pid": r1.pid, "rank": 1, "t": said_at,
                            "syscall": "flock", "wchan": "locks_lock_inode_wait",
                            "meaning": "a file lock"}]
    return j


def test_an_idle_rank_in_flock_is_blocked_not_computing() -> None:
    d = diagnose(flock_job())
    assert d.states[1].kind == StateKind.OS_BLOCKED and d.states[1].blocked_on == "flock"
    [f] = [f for f in d.findings if f.severity == Severity.ERROR]
    assert f.ranks == (1,)
    assert "rank 1 is blocked in flock (a file lock) at train.py:12" in f.summary
    assert "lock" in f.fix


def test_a_blocked_rank_others_wait_for_is_a_hang() -> None:
    found = judge(flock_job(live=True), 5.0)
    assert isinstance(found, HangVerdict) and found.absent == (1,)


def test_an_os_wait_older_than_the_ranks_last_call_is_stale() -> None:
    d = diagnose(flock_job(said_at=T0))
    assert d.states[1].kind == StateKind.COMPUTING


def test_a_busy_rank_is_never_blocked() -> None:
    j = flock_job()
    j.ranks[1].cpu_busy = True
    assert diagnose(j).states[1].kind == StateKind.COMPUTING
    assert all("blocked in" not in f.summary for f in analyze(j, []))


def test_proc_tells_the_sleep_and_the_queue() -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    waiter = subprocess.Popen([sys.executable, "-c", "import queue; queue.Queue().get()"])
    try:
        deadline = time.monotonic() + 20
        said = {}
        while time.monotonic() < deadline and len(said) < 2:
            for name, p in (("sleep", sleeper), ("queue", waiter)):
                found = os_wait(p.pid)
                if found is not None and found["syscall"] in ("clock_nanosleep", "futex"):
                    said[name] = found["syscall"]
            time.sleep(0.1)
        assert said == {"sleep": "clock_nanosleep", "queue": "futex"}
    finally:
        sleeper.kill()
        waiter.kill()
    assert os_wait(sleeper.pid) is None or sleeper.wait() is not None


def test_syscall_names() -> None:
    assert syscall_name(73, "x86_64") == "flock" and syscall_name(32, "aarch64") == "flock"
    assert syscall_name(9999, "x86_64") == "syscall 9999"


def test_the_lock_holder_is_read_from_proc_locks_and_named_by_rank() -> None:
    locks = ("1: FLOCK  ADVISORY  WRITE 1000 fe:00:10092606 0 EOF\n"
             "1: -> FLOCK  ADVISORY  WRITE 1001 fe:00:10092606 0 EOF\n"
             "2: POSIX  ADVISORY  READ 77 fe:00:1 0 EOF\n")
    assert lock_holder(1001, locks) == 1000 and lock_holder(77, locks) is None
    j = flock_job()
    j.supervisor_events[0]["holder_pid"] = j.ranks[0].pid
    f = [f for f in diagnose(j).findings if f.severity == Severity.ERROR][0]
    assert "blocked in flock (a file lock held by rank 0)" in f.summary
    assert f.ranks == (0,) and f.fix.startswith("Rank 0 holds the lock rank 1 waits for")
