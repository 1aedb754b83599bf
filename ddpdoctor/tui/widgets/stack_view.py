"""StackView: a rank's py-spy stack, the user's frames set apart from torch's and Python's."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from ddpdoctor.tui.model import Frame, RankView


class StackView(Static):
    """The stack innermost first; library frames dim, the innermost user frame marked ▶."""

    rank: reactive[RankView | None] = reactive(None, layout=True)

    def render(self) -> Text:
        return stack_text(self.rank) if self.rank else Text("no rank", style="dim")


def stack_text(rank: RankView) -> Text:
    """The stack of a rank as styled text, like `py-spy dump`."""
    if not rank.stack:
        reason = rank.stack_error or (
            "no stack was taken (the process had ended, or py-spy was not allowed to attach)"
        )
        return Text(f"No stack for rank {rank.rank}: {reason}", style="italic yellow")
    text = Text()
    first_user = next((i for i, f in enumerate(rank.stack) if not f.is_library), None)
    width = min(40, max(len(f.name) for f in rank.stack))
    folded = 0
    for index, frame in enumerate(rank.stack):
        if is_ddpdoctor_frame(frame):
            folded += 1  # ddpdoctor's own frames (its patches around the call): one line
            continue
        if folded:
            text.append(f"   {_folded_line(folded)}\n", style="dim italic")
            folded = 0
        if frame.is_library:
            text.append(f"   {frame.name:<{width}}", style="dim")
            text.append(f"  {short_location(frame)}\n", style="dim italic")
            continue
        marker = "▶ " if index == first_user else "  "
        text.append(f" {marker}", style="bold red")
        text.append(f"{frame.name:<{width}}", style="bold")
        text.append(f"  {frame.location}\n", style="bold cyan")
    if folded:
        text.append(f"   {_folded_line(folded)}\n", style="dim italic")
    text.rstrip()
    return text


def _folded_line(count: int) -> str:
    return f"⋯ {count} frame{'s' * (count != 1)} of ddpdoctor's instrumentation folded away"


def is_ddpdoctor_frame(frame: Frame) -> bool:
    """A frame of ddpdoctor's own package, folded away in a stack (``Frame.is_ddpdoctor``)."""
    return frame.is_ddpdoctor


def short_location(frame: Frame) -> str:
    """A library frame's path from its package on (torch/distributed/...), else the file name."""
    path = frame.filename.replace("\\", "/")
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    else:
        if "/lib/python" in path:
            path = path.rsplit("/", 1)[-1]
    return f"{path}:{frame.line}" if frame.line is not None else path
