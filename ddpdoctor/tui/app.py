"""The ddpdoctor terminal UI: make_app (for the CLI and tests), run_ui and run_live."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from textual import work
from textual.app import App
from textual.binding import Binding
from textual.reactive import reactive
from textual.worker import get_current_worker

from ddpdoctor.errors import UserError
from ddpdoctor.tui.messages import PollFailed, RankSelected, ReportPolled
from ddpdoctor.tui.model import CollectiveParser, ReportView
from ddpdoctor.tui.screens.help import HelpScreen
from ddpdoctor.tui.screens.main import MainScreen
from ddpdoctor.tui.screens.rank import RankScreen
from ddpdoctor.tui.source import ReportFeed, ReportSource
from ddpdoctor.terminal_text import safe, say
from ddpdoctor.rundir.layout import read_run_file

#: Seconds between two polls of a live run (4 Hz).
POLL_INTERVAL_S = 0.25
Clock = Callable[[], float]


INTERRUPTED = 130  # the exit status of Ctrl-C (128 + SIGINT)


class DoctorApp(App[int]):
    """Shows a ddpdoctor report: ranks side by side, the collective timeline, findings, stacks."""

    CSS_PATH = "ddpdoctor.tcss"
    TITLE = "ddpdoctor"
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("ctrl+c", "interrupt", "Quit", show=False, priority=True),
        Binding("question_mark", "help", "Help"),
    ]

    report: reactive[ReportView | None] = reactive(None, always_update=True)
    live: reactive[bool] = reactive(False)

    def __init__(
        self,
        source: ReportFeed,
        initial: ReportView | None = None,
        *,
        command: Sequence[str] = (),
        job_log: Path | None = None,
        clock: Clock = time.time,
        poll_interval: float = POLL_INTERVAL_S,
        waiting_message: str = "",
    ) -> None:
        super().__init__()
        self.source = source
        self.initial = initial
        self.command = tuple(command)
        self.job_log = job_log
        self.clock = clock
        self.poll_interval = poll_interval
        self.waiting_message = waiting_message
        self.polls = 0
        self._stop_polling = threading.Event()

    def get_default_screen(self) -> MainScreen:
        return MainScreen(self.command, self.job_log)

    def on_mount(self) -> None:
        if self.initial is not None:
            self.live = self.initial.live and not self.source.finished
            self.report = self.initial
        elif self.waiting_message:
            self.main_screen.show_waiting(self.waiting_message)
        if not self.source.finished:
            self.poll_reports()

    def on_unmount(self) -> None:
        self._stop_polling.set()

    def action_interrupt(self) -> None:
        """Ctrl-C, as in any terminal tool: leave with 130; under `run --ui` it then stops
        the run as Ctrl-C does without the UI (run_live)."""
        self._stop_polling.set()
        self.exit(return_code=INTERRUPTED)

    async def action_quit(self) -> None:
        self._stop_polling.set()
        await super().action_quit()

    @property
    def main_screen(self) -> MainScreen:
        screen = self.screen_stack[0]
        assert isinstance(screen, MainScreen)
        return screen

    def watch_report(self, view: ReportView | None) -> None:
        if view is None or self._stop_polling.is_set() or not self.is_running:
            return
        now = self.clock()
        for screen in self.screen_stack:
            if isinstance(screen, (MainScreen, RankScreen)):
                screen.show_report(view, now)

    def watch_live(self, live: bool) -> None:
        self.sub_title = "live" if live else ""

    @work(thread=True, exclusive=True, group="poll")
    def poll_reports(self) -> None:
        """Poll the source at 4 Hz until it says the report is final; post what it returns."""
        worker = get_current_worker()
        parser = CollectiveParser()
        last_error = ""
        last: tuple[Any, ReportView | None] = (None, None)  # a source's unchanged dict
        while not worker.is_cancelled and not self._stop_polling.is_set():
            started = time.monotonic()
            try:
                data = self.source.poll()
            except UserError as exc:
                error = str(exc)
            except Exception as exc:  # noqa: BLE001 - shown to the user, polling goes on
                error = f"could not read the run: {type(exc).__name__}: {exc}"
            else:
                error = ""
                finished = self.source.finished
                view = last[1] if data is last[0] else ReportView.from_dict(data, parser)
                last = (data, view)
                self.post_message(ReportPolled(view, finished))
                if finished:
                    return
            if error and error != last_error:
                self.post_message(PollFailed(safe(error)))
            last_error = error
            # a slow build (many ranks, a busy box) must not take more than half the CPU
            self._stop_polling.wait(max(self.poll_interval, time.monotonic() - started))

    def on_report_polled(self, message: ReportPolled) -> None:
        if self._stop_polling.is_set() or not self.is_running:
            return  # the app is closing; its widgets may be gone
        self.polls += 1
        was_live = self.live
        self.live = message.view.live and not message.finished
        self.report = message.view
        if was_live and not self.live:
            outcome = message.view.outcome or "ended"
            self.notify(f"The job {outcome}: this is the final report. Press q to quit.", timeout=8,
                        markup=False)

    def on_poll_failed(self, message: PollFailed) -> None:
        if self.report is None:
            self.main_screen.show_waiting(message.message)
        else:
            self.notify(message.message, title="cannot update the report", severity="error",
                        markup=False)

    def on_rank_selected(self, message: RankSelected) -> None:
        if self.report is None:
            return
        if isinstance(self.screen, RankScreen):
            self.screen.rank = message.rank
            return
        self.push_screen(RankScreen(message.rank, self.report, self.clock()))

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())


def make_app(
    path: Path,
    live_command: Sequence[str] | None = None,
    *,
    source: ReportFeed | None = None,
    job_log: Path | None = None,
    clock: Clock = time.time,
    poll_interval: float = POLL_INTERVAL_S,
) -> DoctorApp:
    """Build the UI for a report.json or a run dir; the CLI and the tests both use this.

    Args:
        path: a report.json or a run dir (live or finished).
        live_command: the command of a job being started by `ddpdoctor run --ui`; given,
            the UI waits for the job's first traces instead of failing.
        source: where reports come from (default: a ReportSource over `path`).
        job_log: a file of the job's output to follow in the Log tab.
        clock: unix seconds now (tests pass a fixed clock).
        poll_interval: seconds between polls of a live run.

    Raises:
        UserError: `path` is missing, not a report, or an empty run dir (not when live_command).
    """
    feed: ReportFeed = source if source is not None else ReportSource(path)
    initial: ReportView | None = None
    waiting = ""
    try:
        initial = ReportView.from_dict(feed.poll())
    except UserError as exc:
        if live_command is None:
            raise
        waiting = str(exc)
    if job_log is None and isinstance(feed, ReportSource):
        job_log = feed.job_log
    command = tuple(live_command or (initial.command if initial else ()))
    return DoctorApp(
        feed,
        initial,
        command=command,
        job_log=job_log,
        clock=clock,
        poll_interval=poll_interval,
        waiting_message=waiting or "waiting for the job's first trace…",
    )


def run_ui(path: Path) -> int:
    """`ddpdoctor ui PATH`: show the UI; 2 with a one-line message on stderr for bad input."""
    try:
        app = make_app(Path(path))
    except UserError as exc:
        say(f"ddpdoctor: {exc}")
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - the user gets a sentence, not a traceback
        if os.environ.get("DDPDOCTOR_DEBUG"):
            raise
        say(f"ddpdoctor: cannot show {path}: {type(exc).__name__}: {exc}")
        return 2
    result = app.run()
    if app.return_code == INTERRUPTED:
        return INTERRUPTED
    return result if isinstance(result, int) else 0


def run_live(run_dir: Path, job_log: Path, is_running: Callable[[], bool]) -> None:
    """`ddpdoctor run --ui`: follow a running job until the user quits (q), in the main thread."""
    source = ReportSource(Path(run_dir), is_running=is_running)
    app = make_app(Path(run_dir), live_command=_run_command(Path(run_dir)), source=source, job_log=Path(job_log))
    app.run()
    if app.return_code == INTERRUPTED:
        raise KeyboardInterrupt  # Ctrl-C in the UI: the run stops as on Ctrl-C without it


def _run_command(run_dir: Path) -> list[str]:
    """The job's command from run.json, or [] when it cannot be read yet."""
    try:
        data = read_run_file(run_dir)
    except UserError:
        return []
    command = data.get("command")
    return [safe(str(c)) for c in command] if isinstance(command, list) else []
