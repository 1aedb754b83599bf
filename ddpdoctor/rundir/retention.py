"""Which runs of a runs folder go (keep the newest N, or those younger than an age), and
removing them: only run dirs ddpdoctor named, directly in the folder, never a live one,
never a --run-dir the user named, never through a link."""

from __future__ import annotations

import os
import re
import shutil
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from ddpdoctor.errors import UserError
from ddpdoctor.rundir.runs import RunEntry, list_runs, read_run, running_run_ids
from ddpdoctor.rundir.safe_path import CheckedDir, UnsafePath

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_AGE = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_age(text: str) -> float:
    """``30d``, ``12h``, ``90m``, ``2w``, ``45s`` -> seconds; a UserError (exit 2) else."""
    found = _AGE.fullmatch(text.strip())
    if found is None:
        raise UserError(f"not an age: {text!r} (a number and a unit: 30d, 12h, 90m, 2w, "
                        "45s)", 2)
    return float(found.group(1)) * _UNITS[found.group(2)]


@dataclass
class Pruning:
    """What a prune does: ``remove`` the runs that go; ``kept`` how many runs stay;
    ``live`` runs the rule would remove that still run (kept); ``failed`` (run, why) of
    runs that could not be removed."""

    remove: list[RunEntry] = field(default_factory=list)
    kept: int = 0
    live: list[RunEntry] = field(default_factory=list)
    failed: list[tuple[RunEntry, str]] = field(default_factory=list)

    @property
    def removed_bytes(self) -> int:
        return sum(r.size for r in self.remove)


def plan(runs: list[RunEntry], keep: int | None = None,
         older_than: float | None = None, now: float | None = None) -> Pruning:
    """The runs (newest first) that go: among the runs ddpdoctor named, those past the
    newest ``keep`` (live ones count), or those started more than ``older_than`` seconds
    ago; a live run and a run dir the user named always stay."""
    now = time.time() if now is None else now
    out = Pruning()
    generated = [r for r in runs if r.generated]
    for index, run in enumerate(generated):
        goes = (keep is not None and index >= keep) or \
            (older_than is not None and now - run.started > older_than)
        if goes and run.live:
            out.live.append(run)
        elif goes:
            out.remove.append(run)
    out.kept = len(runs) - len(out.remove)
    return out


def prune(folder: Path, keep: int | None = None, older_than: float | None = None,
          dry_run: bool = False) -> Pruning:
    """Plan the pruning of ``folder`` and, unless ``dry_run``, remove what it names."""
    pruning = plan(list_runs(folder), keep, older_than)
    if dry_run:
        return pruning
    running = running_run_ids()
    done = []
    try:  # removed relative to the folder's checked descriptor (safe_path), never by path
        checked = CheckedDir(folder)
    except UnsafePath as e:
        pruning.failed += [(run, e.strerror or str(e)) for run in pruning.remove]
        pruning.kept += len(pruning.remove)
        pruning.remove = []
        return pruning
    with checked:
        for run in pruning.remove:
            why = _remove(folder, checked, run, running)
            if why is None:
                done.append(run)
            else:
                pruning.failed.append((run, why))
    pruning.kept += len(pruning.remove) - len(done)
    pruning.remove = done
    return pruning


def _remove(folder: Path, checked: CheckedDir, run: RunEntry,
            running: frozenset[str]) -> str | None:
    """Remove one run dir after checking again that it is a directory (not a link)
    directly in ``folder`` and not live; returns why not, or None once removed.  The
    removal is relative to the folder's checked descriptor (``checked``): fd-based, a link
    inside is removed, not followed."""
    if run.path.parent != folder:
        return "not directly in the runs folder"
    again = read_run(run.path, running)
    if again is None or again.live or not again.generated:
        return "it is live now" if again is not None and again.live else "it changed"
    try:
        st = os.stat(run.path.name, dir_fd=checked.fd, follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode):
            return "not a directory"
        shutil.rmtree(run.path.name, dir_fd=checked.fd)
    except OSError as e:
        return e.strerror or str(e)
    return None
