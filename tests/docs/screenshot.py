"""Write docs/img/tui-hang.svg: the terminal UI on the README example's hang, a real report.

`python -m tests.docs.screenshot` from the checkout; the report is the one
`ddpdoctor run --hang-timeout 10 --nproc-per-node 2 examples/train_hang.py` wrote
(tests/fixtures/reports/train_hang.json). The UI is driven by Textual's pilot, as in tests/tui."""

from __future__ import annotations

import asyncio
from pathlib import Path

from ddpdoctor.tui.app import make_app

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "tests" / "fixtures" / "reports" / "train_hang.json"
SCREENSHOT = ROOT / "docs" / "img" / "tui-hang.svg"
SIZE = (100, 32)


def fixed_clock() -> float:
    return 1795821600.0  # a moment after the report's end: a finished run's times


async def save(path: Path = SCREENSHOT) -> Path:
    """The Findings tab (the summary above it), saved as SVG."""
    app = make_app(REPORT, clock=fixed_clock)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f")
        await pilot.pause()
        app.save_screenshot(filename=path.name, path=str(path.parent))
    return path


if __name__ == "__main__":
    print(asyncio.run(save()))
