"""Messages the UI's widgets and workers post to one another."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from ddpdoctor.tui.model import ReportView


@dataclass
class RankSelected(Message):
    """The user chose a rank (Enter or a click): show its stack and last collectives."""

    rank: int


@dataclass
class ReportPolled(Message):
    """The poll worker read a new report."""

    view: ReportView
    finished: bool


@dataclass
class PollFailed(Message):
    """The poll worker could not read the report; `message` says why, in one line."""

    message: str
