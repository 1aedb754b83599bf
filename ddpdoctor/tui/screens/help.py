"""HelpScreen: the key bindings, the rank states and what the timeline's cells mean."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from ddpdoctor.tui.keys import KEYS
from ddpdoctor.tui.styles import OP_ABBREVIATIONS, RANK_STATES, STATE_STYLES



class HelpScreen(ModalScreen[None]):
    """What every key does and what the colours mean."""

    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(help_text())

    def on_mount(self) -> None:
        self.query_one("#help-box").border_title = "ddpdoctor help (escape to close)"

    def on_click(self) -> None:
        self.dismiss()


def help_text() -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    for key, meaning in KEYS:
        table.add_row(key, meaning)
    table.add_row("", "")
    states = Text()
    for state in RANK_STATES:
        states.append(state, style=STATE_STYLES[state])
        states.append("  ")
    table.add_row("rank states", states)
    ops = ", ".join(f"{short} {op}" for op, short in list(OP_ABBREVIATIONS.items())[:14] if op != "allreduce")
    table.add_row("timeline ops", ops)
    table.add_row(
        "timeline cells",
        Text.from_markup(
            "[u b]AR[/] in flight   [b red]AR[/] differs from most ranks   [on red] AR [/] the rank at fault "
            "at the divergent seq   [black on yellow] AR [/] the others there   · not reached"
        ),
    )
    table.add_row("stack", Text.from_markup("[b]your frames[/] bold, [b red]▶[/] the innermost; [dim]torch, site-packages, stdlib dim; ddpdoctor's own frames folded into one line[/]"))
    table.add_row("", "")
    table.add_row("time", Text.from_markup("how long the rank has been in its current collective: [yellow]>5s[/], [b red]>30s[/]"))
    return table
