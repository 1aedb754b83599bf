"""Which frames of a stack are the user's: not torch's, not the launcher's, not ddpdoctor's.

Findings quote the user's and torch's frames, never ddpdoctor's own."""

from __future__ import annotations

import os
import re

from ddpdoctor.analysis.load.user_source import declares_launcher
from ddpdoctor.analysis.model import RankRun

INTERNAL_PARTS = ("site-packages", "/torch/", "/ddpdoctor/", "/lib/python3", "<frozen")


def user_frames(run: RankRun) -> list[tuple[str, str]]:
    """(``path:line``, function) of each user frame of the rank's stack, innermost first."""
    out = []
    for frame in run.stack or []:
        fn = str(frame.get("filename", ""))
        if fn and not any(p in fn for p in INTERNAL_PARTS) and not declares_launcher(fn):
            out.append((f"{fn}:{frame.get('line')}", str(frame.get("name") or "")))
    return out


def user_frame(run: RankRun) -> tuple[str | None, str]:
    """(``path:line``, function) of the innermost user frame of the rank's stack."""
    frames = user_frames(run)
    return frames[0] if frames else (None, "")


PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INSTALLED_PACKAGE = re.compile(r"[/\\](site|dist)-packages[/\\]ddpdoctor[/\\]")


def ddpdoctor_frame(filename: str) -> bool:
    """Is this frame ddpdoctor's own: its package here, an installed copy, or another
    checkout (a trace analysed away from the job) naming one of this package's modules?
    Findings quote the user's and torch's frames, never these."""
    if filename.startswith(PACKAGE_DIR + os.sep) or INSTALLED_PACKAGE.search(filename):
        return True
    parts = re.split(r"[/\\]", filename)
    return any(os.path.isfile(os.path.join(PACKAGE_DIR, *parts[i + 1:]))
               for i, part in enumerate(parts[:-1]) if part == "ddpdoctor")


def without_own_frames(dump: str) -> str:
    """A faulthandler dump without the lines of ddpdoctor's own frames."""
    return "\n".join(line for line in dump.splitlines()
                     if not (line.lstrip().startswith("File \"") and
                             ddpdoctor_frame(line.strip()[6:].partition('"')[0])))
