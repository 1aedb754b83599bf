"""A repro's header: what the job was, what ddpdoctor found, and the command that replays it."""

from __future__ import annotations

import os
import re
import shlex

from ddpdoctor.repro.facts import ReplayJob
from ddpdoctor.repro.safe_text import doc

WIDTH = 100  # the script's line width
REPLAY_LINE = re.compile(r"^Replay: ddpdoctor run (.+)$", re.M)


def header_lines(job: ReplayJob) -> list[str]:
    """The script's first lines: its #! line and the docstring that describes the job."""
    words = [os.path.basename(c) if os.path.isabs(c) and
             re.fullmatch(r"python[\d.]*|torchrun", os.path.basename(c)) else c
             for c in job.command]
    cmd = doc(" ".join(shlex.quote(c) for c in words) or "unknown")
    n = job.world_size
    lines = [
        "#!/usr/bin/env python",
        f'"""ddpdoctor repro: the collectives of a recorded job, replayed with zero tensors.',
        "",
        f"Job:    {cmd}",
        f"        {n} ranks, started {doc(str(job.started_at))}, {doc(str(job.outcome))}; "
        f"recorded by {doc(str(job.source))}",
        f"        (run dir {doc(str(job.run_dir))})",
    ]
    if job.finding:
        lines.append("Found:  " + wrap(job.finding, "        "))
    lines += [f"Replay: {replay_command(job, 'THIS_FILE')}",
              f"        (plain torchrun --nproc-per-node {n} THIS_FILE runs it too, but without",
              "        ddpdoctor a gloo mismatch often aborts within seconds instead of hanging)",
              "Needs torch only: no model, no data, no import of the job's code. Each call",
              "says where the job made it (file:line and its source line)."]
    for note in job.notes:
        lines.append("Not replayed: " + wrap(note, "        "))
    lines.append('"""')
    return lines


def replay_command(job: ReplayJob, script: str) -> str:
    """The ``ddpdoctor run`` command line that replays ``job`` from ``script``."""
    return (f"ddpdoctor run --hang-timeout {job.hang_timeout:g} --nproc-per-node "
            f"{job.world_size} {script}")


def replay_args(script: str) -> list[str] | None:
    """The ``ddpdoctor run`` arguments a repro's header gives (the inverse of
    ``replay_command``; its last is the script), None when the header has no such line."""
    found = REPLAY_LINE.search(script)
    return shlex.split(found[1]) if found else None


def wrap(text: str, indent: str) -> str:
    """``text`` broken into lines of the script's width, the later ones indented."""
    words, out, line = doc(text).split(), [], ""
    for w in words:
        if line and len(line) + len(w) + 1 > WIDTH - len(indent):
            out.append(line)
            line = w
        else:
            line = f"{line} {w}" if line else w
    out.append(line)
    return f"\n{indent}".join(out)
