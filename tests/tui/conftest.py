"""Fixtures of the UI tests: the 4-rank hang report, a fixed clock, a fake live feed."""

from __future__ import annotations

import asyncio
import copy
import inspect
from pathlib import Path
from typing import Any, Callable

import pytest

from tui_reports import HANG_4RANKS, T0, make_hang_report

#: A moment 70 s after the fixture job started: the "now" of every test that needs one.
FIXED_NOW = T0 + 70.0


def fixed_clock() -> float:
    return FIXED_NOW


class FakeFeed:
    """A report feed that returns the given reports one poll after another, then the last forever."""

    def __init__(self, reports: list[dict[str, Any] | Exception], finish_at_end: bool = False) -> None:
        self.reports = [copy.deepcopy(r) if isinstance(r, dict) else r for r in reports]
        self.finish_at_end = finish_at_end
        self.calls = 0
        self._finished = False

    @property
    def finished(self) -> bool:
        return self._finished

    def serve(self, report: dict[str, Any] | Exception, finish: bool = False) -> None:
        """From the next poll on, return `report`."""
        self.reports = [copy.deepcopy(report) if isinstance(report, dict) else report]
        self.finish_at_end = finish

    def poll(self) -> dict[str, Any]:
        index = min(self.calls, len(self.reports) - 1)
        self.calls += 1
        if self.finish_at_end and index == len(self.reports) - 1:
            self._finished = True
        item = self.reports[index]
        if isinstance(item, Exception):
            raise item
        return copy.deepcopy(item)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run `async def` tests (Textual's pilot tests) in a fresh event loop, with no plugin."""
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    names = pyfuncitem._fixtureinfo.argnames
    kwargs = {name: pyfuncitem.funcargs[name] for name in names}
    asyncio.run(pyfuncitem.obj(**kwargs))
    return True


@pytest.fixture
def hang_report_path() -> Path:
    assert HANG_4RANKS.is_file(), "run `python tests/tui/tui_reports.py` to write the fixture"
    return HANG_4RANKS


@pytest.fixture
def hang_report() -> dict[str, Any]:
    return make_hang_report()


@pytest.fixture
def clock() -> Callable[[], float]:
    return fixed_clock


__all__ = ["FakeFeed", "FIXED_NOW", "fixed_clock"]
