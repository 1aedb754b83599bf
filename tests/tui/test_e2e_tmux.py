"""End to end: the real `ddpdoctor ui` / `ddpdoctor run --ui` in a tmux terminal of 120x40, driven by keys."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tui_reports import HANG_4RANKS

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

JOBS = Path(__file__).resolve().parent / "jobs"
HANG_JOB = JOBS / "hang_mismatch.py"


def ddpdoctor_command() -> list[str]:
    """The installed `ddpdoctor` of this Python, else `python -m ddpdoctor.cli`."""
    script = Path(sys.executable).parent / "ddpdoctor"
    return [str(script)] if script.exists() else [sys.executable, "-m", "ddpdoctor.cli"]


def works(*args: str) -> bool:
    try:
        result = subprocess.run([*ddpdoctor_command(), *args], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


def ui_command(path: Path) -> str:
    """`ddpdoctor ui PATH`, or run_ui straight when the CLI does not have `ui` yet."""
    if works("ui", "--help"):
        return shlex.join([*ddpdoctor_command(), "ui", str(path)])
    code = "import sys; from pathlib import Path; from ddpdoctor.tui.app import run_ui; sys.exit(run_ui(Path(sys.argv[1])))"
    return shlex.join([sys.executable, "-c", code, str(path)])


class TmuxTerminal:
    """A detached tmux session on its own server socket, 120x40, running one command."""

    def __init__(self, command: str, cwd: Path) -> None:
        self.socket = f"ddpdoctor-tui-{uuid.uuid4().hex[:10]}"
        # COLUMNS/LINES (set by some test runners) would override the 120x40 terminal size
        shell = f"cd {shlex.quote(str(cwd))} && unset COLUMNS LINES && {command}; echo __EXIT=$?; sleep 600"
        self._tmux("new-session", "-d", "-s", "main", "-x", "120", "-y", "40", shell)

    def _tmux(self, *args: str) -> str:
        result = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=30)
        if result.returncode != 0:
            raise RuntimeError(f"tmux {args[0]} failed: {result.stderr.strip()}")
        return result.stdout

    def keys(self, *keys: str, pause: float = 0.4) -> None:
        for key in keys:  # one at a time: tmux would merge "Escape" and a following key into Alt+key
            self._tmux("send-keys", "-t", "main", key)
            time.sleep(pause)

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", "main")

    def wait_for(self, pattern: str, timeout: float = 45.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen()
            if re.search(pattern, text):
                return text
            if time.monotonic() > deadline:
                raise AssertionError(f"{pattern!r} did not appear within {timeout}s; screen:\n{text}")
            time.sleep(0.25)

    def wait_gone(self, pattern: str, timeout: float = 45.0) -> None:
        """Wait until ``pattern`` is off the screen.  After Escape, the next key must wait
        for this: an app slow to read (a loaded box) would get both bytes at once and read
        Escape and the key as one Alt+key."""
        deadline = time.monotonic() + timeout
        while re.search(pattern, self.screen()):
            if time.monotonic() > deadline:
                raise AssertionError(f"{pattern!r} still on the screen after {timeout}s")
            time.sleep(0.25)

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=30)


@pytest.fixture
def terminal_factory():
    terminals: list[TmuxTerminal] = []

    def start(command: str, cwd: Path) -> TmuxTerminal:
        terminal = TmuxTerminal(command, cwd)
        terminals.append(terminal)
        return terminal

    try:
        yield start
    finally:
        for terminal in terminals:
            terminal.kill()


def test_ui_shows_a_hang_report_and_follows_keys(terminal_factory, tmp_path: Path) -> None:
    term = terminal_factory(ui_command(HANG_4RANKS), tmp_path)
    screen = term.wait_for(r"collective_mismatch", timeout=60)
    assert " HUNG " in screen and "4 ranks" in screen
    assert re.search(r"!2\s+hung\s+broadcast 1 float32\s+\S+\s+train\.py:63\s+7\s+6\s+0", screen), screen
    for rank in (0, 1, 3):
        assert re.search(rf"\n\s+{rank}\s+hung\s+all_reduce 4096x1024", screen), screen

    term.keys("t")
    screen = term.wait_for(r"!r2\s+BC(\s+AR){6}\s+BC")
    assert "collectives of process group 0" in screen
    assert re.search(r"\sr0\s+BC(\s+AR){7}", screen), screen

    term.keys("f")
    screen = term.wait_for(r"Fix: ")
    assert "ERROR" in screen and "straggler" in screen

    term.keys("r")
    term.wait_for(r"current op")  # the table is shown, so its focus (queued) has landed
    term.keys("Down", "Down", "Enter")
    screen = term.wait_for(r"▶ sync_loss_scale")
    assert re.search(r"rank 2 +hung", screen), screen
    assert "▶ sync_loss_scale" in screen and "/home/ana/proj/train.py:63" in screen
    assert "torch/distributed/distributed_c10d.py:2737" in screen
    assert "last collectives" in screen

    term.keys("Escape")
    term.wait_gone(r"▶ sync_loss_scale")
    term.keys("?")
    screen = term.wait_for(r"ddpdoctor help")
    term.keys("Escape")
    term.wait_gone(r"ddpdoctor help")
    term.keys("/")
    term.wait_for(r"filter ranks:")  # the filter's input is shown, so it has the focus
    term.keys("3", "Enter")
    screen = term.wait_for(r"Ranks \(1/4\)")
    term.keys("q")
    term.wait_for(r"__EXIT=0")


def test_ui_reports_bad_input_in_one_line(terminal_factory, tmp_path: Path) -> None:
    (tmp_path / "report.json").write_text('{"schema": "ddpdoctor.report/1", "ranks": [')
    term = terminal_factory(ui_command(tmp_path / "report.json"), tmp_path)
    screen = term.wait_for(r"__EXIT=2", timeout=60)
    assert "ddpdoctor: " in screen and "Traceback" not in screen


def run_available() -> bool:
    return works("run", "--help")


def test_ui_on_a_real_hung_job(terminal_factory, tmp_path: Path) -> None:
    assert run_available(), "`ddpdoctor run --help` failed"
    run_dir = tmp_path / "run"
    job = subprocess.run(
        [*ddpdoctor_command(), "run", "--nproc-per-node", "2", "--hang-timeout", "3",
         "--run-dir", str(run_dir), str(HANG_JOB)],
        capture_output=True, text=True, timeout=240, cwd=tmp_path,
    )
    assert (run_dir / "report.json").is_file(), job.stderr[-2000:]
    term = terminal_factory(ui_command(run_dir), tmp_path)
    screen = term.wait_for(r"collective_mismatch", timeout=60)
    assert " HUNG " in screen
    assert re.search(r"\s!?0\s+hung\s+all_reduce 64x8 float32", screen), screen
    assert re.search(r"\s!?1\s+hung\s+broadcast 1 float32", screen), screen
    term.keys("t")
    screen = term.wait_for(r"r1\s+(AR\s+){4}BC")
    assert re.search(r"r0\s+(AR\s+){4}AR", screen), screen
    term.keys("r", "Down", "Enter")
    screen = term.wait_for(r"▶ sync_loss_scale")
    assert re.search(r"rank 1 +hung", screen), screen
    assert "hang_mismatch.py:16" in screen
    term.keys("q")
    term.wait_for(r"__EXIT=0")


def test_run_ui_follows_the_live_job_until_it_hangs(terminal_factory, tmp_path: Path) -> None:
    assert run_available(), "`ddpdoctor run --help` failed"
    run_dir = tmp_path / "run"
    command = shlex.join([*ddpdoctor_command(), "run", "--ui", "--nproc-per-node", "2", "--hang-timeout", "4",
                          "--run-dir", str(run_dir), str(HANG_JOB)])
    term = terminal_factory(command, tmp_path)
    screen = term.wait_for(r"● running", timeout=120)
    live_row = r"\n\s*!?[01]\s+(starting|computing|in_collective|waiting)\s"
    screen = term.wait_for(live_row, timeout=120)
    # the top bar and the findings pane are redrawn apart: a capture can fall between them
    screen = term.wait_for(r"(?s)\A(?=.* HUNG ).*collective_mismatch", timeout=120)
    assert re.search(r"\n\s*!?1\s+hung\s", screen), screen
    term.keys("l")
    term.wait_for(r"rank [01] step 3")
    term.keys("q")
    term.wait_for(r"__EXIT=124", timeout=60)
