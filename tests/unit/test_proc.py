"""Process control on real processes: a job tree is found through the OS and stopped whole."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ddpdoctor.proc.control import JobTree, start_job, stop_job
from ddpdoctor.proc.table import alive, descendants, proc_info, scan
from ddpdoctor.runtime.supervisor_watch import SupervisorWatch

# a job whose child leaves the session (setsid) and whose grandchild ignores SIGTERM
TREE = r"""
import os, signal, subprocess, sys, time
a = subprocess.Popen(["sleep", "3600"])
b = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ready', flush=True); time.sleep(3600)"],
    start_new_session=True)
print(a.pid, b.pid, flush=True)
time.sleep(3600)
"""


def _wait(predicate, timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_proc_info_reads_this_process():
    me = proc_info(os.getpid())
    assert me is not None and me.pid == os.getpid() and me.ppid == os.getppid()
    assert me.session == os.getsid(0) and me.pgrp == os.getpgid(0) and me.start > 0
    assert alive(os.getpid()) and os.getpid() in scan()


def test_descendants_walk_parent_links():
    table = scan()
    assert os.getpid() in descendants(table, [os.getppid()])
    assert os.getppid() not in descendants(table, [os.getpid()])


def test_stop_job_reaches_a_child_outside_the_session_and_sigkills_the_stubborn(tmp_path):
    out = (tmp_path / "out").open("w+b")
    proc = start_job([sys.executable, "-c", TREE], dict(os.environ), out)
    assert _wait(lambda: out.seek(0) == 0 and b"ready" in out.read())
    out.seek(0)
    sleeper, stubborn = (int(x) for x in out.read().split() if x.isdigit())
    tree = JobTree((proc.pid,))
    assert _wait(lambda: {proc.pid, sleeper, stubborn} <= set(tree.snapshot()))
    assert proc_info(stubborn).session != proc.pid  # left the job's session
    result = stop_job(proc, tree, grace=1.0)
    assert result.signal == "SIGTERM"
    assert {proc.pid, sleeper, stubborn} <= set(result.pids)
    assert stubborn in result.killed and sleeper not in result.killed
    assert result.exit_code == -signal.SIGTERM
    assert _wait(lambda: not alive(sleeper) and not alive(stubborn), 10)
    assert tree.alive() == []


def test_subreaper_takes_orphans(tmp_path):
    # in a child, so that this test process keeps its own parentage
    code = ("import os, subprocess, sys, time\n"
            "from ddpdoctor.proc.control import become_subreaper\n"
            "assert become_subreaper()\n"
            "p = subprocess.Popen(['sh', '-c', 'sleep 30 & echo $!'], stdout=subprocess.PIPE)\n"
            "orphan = int(p.stdout.readline()); p.wait(); time.sleep(0.3)\n"
            "ppid = open(f'/proc/{orphan}/stat').read().rsplit(')', 1)[1].split()[1]\n"
            "os.kill(orphan, 9); os.waitpid(orphan, 0)\n"
            "print(int(ppid) == os.getpid())\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env={**os.environ})
    assert run.stdout.strip() == "True", run.stderr


def test_supervisor_watch_waits_for_stillness(tmp_path: Path):
    (tmp_path / "traces").mkdir()
    watch = SupervisorWatch(tmp_path, os.getpid(), hang_timeout=5)
    assert not watch.supervisor_gone()
    assert not watch.job_still(100.0)
    assert not watch.job_still(103.0)
    assert watch.job_still(105.5)  # no trace record and no CPU for 5 s


def test_supervisor_watch_sees_a_gone_supervisor(tmp_path: Path):
    child = subprocess.Popen(["sleep", "30"])
    watch = SupervisorWatch(tmp_path, child.pid, hang_timeout=5)
    assert not watch.supervisor_gone()
    child.kill()
    child.wait()
    assert watch.supervisor_gone()


def test_supervisor_watch_leaves_a_still_job_running_under_on_hang_wait(tmp_path: Path):
    """With the supervisor gone and nothing moving, ``--on-hang wait`` says so and ends
    nothing (in a process of its own: ending the job would end that process)."""
    (tmp_path / "traces").mkdir()
    code = ("import sys, time\n"
            "from pathlib import Path\n"
            "from ddpdoctor.runtime.supervisor_watch import SupervisorWatch\n"
            "w = SupervisorWatch(Path(sys.argv[1]), 999999999, hang_timeout=0.5,"
            " on_hang='wait')\n"
            "w.supervisor_start = None\n"
            "w._check(); time.sleep(0.7); w._check(); w._check()\n"
            "print('alive', flush=True)\n")
    run = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                         text=True, timeout=60, env={**os.environ})
    assert run.returncode == 0 and run.stdout.strip() == "alive", run.stderr
    assert run.stderr.count("left running (--on-hang wait)") == 1, run.stderr


# A launcher that reacts to SIGTERM as torchrun does (it ends its workers) with two ranks in
# sessions of their own; rank 1 has a `sleep` in a session of its own.  Rank 0 ends the job
# when GO appears, as a rank's supervisor watch does.
LAUNCHER = r"""
import os, signal, subprocess, sys, time
out, go, reacted = sys.argv[1:4]
RANK0 = ("import os, sys, time\n"
         "from pathlib import Path\n"
         "while not os.path.exists(sys.argv[1]): time.sleep(0.05)\n"
         "from ddpdoctor.runtime.supervisor_watch import end_job\n"
         "end_job('rank 0 decided', 999999999, Path(sys.argv[1]).parent)\n")
RANK1 = ("import subprocess, time\n"
         "s = subprocess.Popen(['sleep', '3600'], start_new_session=True)\n"
         "print(s.pid, flush=True); time.sleep(3600)\n")
ranks = [subprocess.Popen([sys.executable, "-c", RANK0, go], start_new_session=True),
         subprocess.Popen([sys.executable, "-c", RANK1], start_new_session=True,
                          stdout=subprocess.PIPE)]
def on_term(*_):
    open(reacted, "w").close()
    for r in ranks:
        r.kill()
    sys.exit(1)
signal.signal(signal.SIGTERM, on_term)
sleeper = ranks[1].stdout.readline().decode().strip()
with open(out + ".tmp", "w") as f:
    f.write(f"{ranks[0].pid} {ranks[1].pid} {sleeper}")
os.rename(out + ".tmp", out)
time.sleep(3600)
"""


def test_a_rank_that_ends_the_job_ends_all_of_it_and_the_launcher_cannot_interfere(
        tmp_path: Path):
    env = {**os.environ, "DDPDOCTOR_SUPERVISOR_PID": "999999999"}  # the job's mark
    out, go, reacted = tmp_path / "pids", tmp_path / "go", tmp_path / "reacted"
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(out), str(go),
                                 str(reacted)], env=env, start_new_session=True,
                                stderr=subprocess.PIPE, text=True)
    everyone = [launcher.pid]
    try:
        assert _wait(out.exists, 30), launcher.stderr
        rank0, rank1, sleeper = (int(x) for x in out.read_text().split())
        everyone += [rank0, rank1, sleeper]
        go.touch()
        assert _wait(lambda: not any(alive(p) for p in everyone), 30)
        launcher.wait(timeout=10)
        assert not reacted.exists()  # frozen before anything else was signalled
        assert launcher.returncode == -signal.SIGKILL
        assert "rank 0 decided: ending the job" in launcher.stderr.read()
    finally:
        for pid in everyone:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


DECIDER = r"""
import sys, time
from pathlib import Path
from ddpdoctor.runtime.supervisor_watch import end_job
go = Path(sys.argv[1])
while not go.exists():
    time.sleep(0.01)
end_job("a process decided", 999999999, go.parent)
time.sleep(3600)  # the claim was another's: this process waits to be ended with the job
"""


def test_processes_that_decide_together_end_the_job_once(tmp_path: Path):
    env = {**os.environ, "DDPDOCTOR_SUPERVISOR_PID": "999999999"}  # the job's mark
    go = tmp_path / "go"
    deciders = [subprocess.Popen([sys.executable, "-c", DECIDER, str(go)], env=env,
                                 start_new_session=True, stderr=subprocess.PIPE, text=True)
                for _ in range(3)]
    try:
        time.sleep(1.0)  # each is waiting for GO
        go.touch()
        said = "".join(d.communicate(timeout=60)[1] for d in deciders)
        assert said.count("a process decided: ending the job") == 1, said
        assert all(d.returncode in (-signal.SIGTERM, -signal.SIGKILL) for d in deciders)
        assert (tmp_path / "ending.lock").stat().st_mode & 0o077 == 0
    finally:
        for d in deciders:
            if d.poll() is None:
                d.kill()
