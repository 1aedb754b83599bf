"""What the supervisor took of each rank beside its trace: its py-spy stack, its child
processes' stacks (DataLoader workers) and faulthandler's dump, each read as untrusted input
(bounded, regular files only, its text cleaned)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ddpdoctor.analysis.model import RankRun
from ddpdoctor.rundir.bounded import BadInput, load_json, read_file
from ddpdoctor.trace.reader import RankTrace
from ddpdoctor.trace.text import clean, clean_value

MAX_STACK_BYTES = 8 << 20
MAX_FAULT_BYTES = 20000  # faulthandler's dump: what is shown of it


def load_stack(path: Path) -> tuple[list[dict[str, Any]] | None, str | None]:
    """A rank's py-spy stack as written by the supervisor: (frames, None) or (None, why)."""
    try:
        data = load_json(read_file(path, MAX_STACK_BYTES), path)
    except FileNotFoundError:
        return None, None
    except BadInput as e:
        if not e.damaged:
            raise  # a FIFO, a device, a link or a huge file: hostile, exit 2
        return None, f"unreadable stack file {path.name} (damaged)"
    except OSError as e:
        return None, f"unreadable stack file {path.name} ({type(e).__name__})"
    if not isinstance(data, dict):
        return None, f"unreadable stack file {path.name}"
    frames = data.get("frames")
    if isinstance(frames, list):  # its text is shown: no control character survives
        return [clean_value(f) for f in frames if isinstance(f, dict)], None
    return None, clean(str(data.get("error") or "no stack")[:500])


def fault_text(trace: RankTrace) -> str:
    """faulthandler's dump: the crashing thread ("Current thread") first, then the user's
    other threads; ddpdoctor's own threads and the list of extension modules left out."""
    path = trace.path.with_name(trace.path.name.replace(".ring", ".fault.txt"))
    try:
        text = read_file(path, MAX_FAULT_BYTES, head=True).decode("utf-8", "replace").strip()
    except OSError:
        return ""
    return _user_threads_first(text)


_THREAD_BLOCK = re.compile(r"\n\n(?=(?:Current thread|Thread) 0x)")


def _user_threads_first(text: str) -> str:
    head, *threads = _THREAD_BLOCK.split(text)
    if not threads:
        return text
    threads[-1] = threads[-1].split("\n\n", 1)[0]  # not the "Extension modules: ..." list
    own = f"{os.sep}ddpdoctor{os.sep}runtime{os.sep}"
    kept = [t for t in threads if t.startswith("Current") or
            not any(own in line for line in t.splitlines()[1:2])]
    kept.sort(key=lambda t: not t.startswith("Current"))
    return "\n\n".join([head, *kept])


MAX_CHILD_STACKS = 256  # stack files of the ranks' child processes read from one run dir


def attach_children(run_dir: Path, runs: list[RankRun], stack_files: set[str]) -> None:
    """The stacks of the ranks' child processes (DataLoader workers, a subprocess) the
    supervisor took beside theirs, each file naming its rank's pid as ``parent``."""
    by_pid = {run.pid: run for run in runs}
    own = {f"pid-{pid}.json" for pid in by_pid}
    names = sorted(n for n in stack_files if n.startswith("pid-") and n.endswith(".json")
                   and n.count(".") == 1 and n not in own)[:MAX_CHILD_STACKS]
    for name in names:
        path = run_dir / "stacks" / name
        try:
            data = load_json(read_file(path, MAX_STACK_BYTES), path)
        except (BadInput, OSError):
            continue  # a child's stack is a detail: an odd file is left out, not refused
        parent = data.get("parent") if isinstance(data, dict) else None
        run = by_pid.get(parent) if type(parent) is int else None
        frames = data.get("frames")
        if run is not None and isinstance(frames, list) and type(data.get("pid")) is int:
            run.children.append((data["pid"], [f for f in frames if isinstance(f, dict)]))
