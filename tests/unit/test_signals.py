"""proc.signals: the signals that end a run, their exit statuses, and a closed output seen
through real pipes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from ddpdoctor.proc.signals import (OUTPUT_CLOSED, Interrupted, OutputWatch, exit_status,
                                    interrupts_raised, signal_of, silence_closed_output)


def test_exit_status_is_128_plus_the_signal():
    assert [exit_status(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP,
                                     OUTPUT_CLOSED)] == [130, 143, 129, 141]


def test_a_bare_keyboard_interrupt_is_ctrl_c():
    assert signal_of(KeyboardInterrupt()) == signal.SIGINT
    assert signal_of(Interrupted(signal.SIGHUP)) == signal.SIGHUP


@pytest.fixture
def handled(request):
    """The signal ``request.param`` handled by a handler of the test's own while the test
    runs, whatever disposition pytest inherited (`nohup` leaves SIGHUP ignored, a shell's
    `&` SIGINT, and an ignored signal stays ignored under ddpdoctor, rightly); the
    inherited one comes back afterwards."""
    sig = request.param

    def own(signum: int, frame: object) -> None:
        raise AssertionError(f"the test's own handler got {signal.Signals(signum).name}")

    inherited = signal.signal(sig, own)
    try:
        yield sig, own
    finally:
        signal.signal(sig, inherited)


@pytest.mark.parametrize("handled", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT],
                         indirect=True, ids=["SIGTERM", "SIGHUP", "SIGINT"])
def test_each_ending_signal_raises_interrupted_then_the_old_handler_is_back(handled):
    sig, before = handled
    with pytest.raises(Interrupted) as caught:
        with interrupts_raised():
            os.kill(os.getpid(), sig)
            time.sleep(5)  # the handler's exception ends the sleep at once
    assert caught.value.signum == sig
    assert isinstance(caught.value, KeyboardInterrupt)  # every Ctrl-C path takes it
    assert signal.getsignal(sig) is before


def test_an_ignored_sighup_stays_ignored():  # as `nohup ddpdoctor run ...` leaves it
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with interrupts_raised():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)


WATCH = """
import os, sys, time
from ddpdoctor.proc.signals import OutputWatch, silence_closed_output
watch = OutputWatch()
os.write(2, f"watched {watch.fds}\\n".encode())
sys.stdin.readline()  # the test closes the reader of stdout, then says go
os.write(2, f"closed {watch.closed()}\\n".encode())
silence_closed_output()
print("x" * 100000)  # into /dev/null now: no BrokenPipeError, no exit 120
"""


def test_a_closed_stdout_pipe_is_seen_and_silenced():
    reader = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                              stdin=subprocess.PIPE)
    child = subprocess.Popen([sys.executable, "-c", WATCH], stdin=subprocess.PIPE,
                             stdout=reader.stdin, stderr=subprocess.PIPE, text=True)
    reader.stdin.close()  # type: ignore[union-attr]
    try:
        assert child.stderr.readline().strip() == "watched (1, 2)"  # type: ignore[union-attr]
        reader.kill()
        reader.wait()
        child.stdin.write("go\n")  # type: ignore[union-attr]
        child.stdin.flush()  # type: ignore[union-attr]
        assert child.stderr.readline().strip() == "closed (1,)"  # type: ignore[union-attr]
        assert child.wait(timeout=30) == 0
    finally:
        for p in (child, reader):
            if p.poll() is None:
                p.kill()


def test_a_regular_file_is_not_watched(tmp_path):
    with open(tmp_path / "out", "wb") as f:
        saved = os.dup(1)
        os.dup2(f.fileno(), 1)
        try:
            assert 1 not in OutputWatch((1,)).fds
        finally:
            os.dup2(saved, 1)
            os.close(saved)
