"""Lint beside the runtime: a runtime finding whose line lint flagged before the run says so.

`ddpdoctor run` lints the job's script before the start (lint/prerun.py, kept in the run dir by
rundir/lint_results.py). When a finding of the run names a file:line that lint flagged, the
finding carries ``evidence.lint_before_run`` ({"file", "line", "kind", "severity"}) and the
console box and the TUI's finding card say "lint saw this at train.py:37 before the run"."""

from __future__ import annotations

import os
import re
from typing import Any, Iterable, Iterator

LINT_KEY = "lint_before_run"
# a file:line in a finding's text: `train.py:37`, `/abs/path/train.py:37`
SITE = re.compile(r"([\w./\\-]+\.py):(\d+)")


def _sites_in(value: Any) -> Iterator[tuple[str, int]]:
    """Every (file basename, line) a finding's evidence or text names."""
    if isinstance(value, str):
        for m in SITE.finditer(value):
            yield os.path.basename(m.group(1)), int(m.group(2))
    elif isinstance(value, dict):
        if isinstance(value.get("file"), str) and isinstance(value.get("line"), int):
            yield os.path.basename(value["file"]), value["line"]
        for sub in value.values():
            yield from _sites_in(sub)
    elif isinstance(value, (list, tuple)):
        for sub in value:
            yield from _sites_in(sub)


def finding_sites(finding: dict[str, Any]) -> list[tuple[str, int]]:
    """The user's file:line sites a runtime finding names, in the order it names them."""
    seen: dict[tuple[str, int], None] = {}
    for part in (finding.get("summary"), finding.get("detail"), finding.get("evidence")):
        for site in _sites_in(part):
            seen.setdefault(site, None)
    return list(seen)


def lint_seen(finding: dict[str, Any], lint: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The first lint finding (errors first) at a line this runtime finding names, or None."""
    sites = set(finding_sites(finding))
    flagged = sorted((f for f in lint if isinstance(f.get("line"), int)
                      and isinstance(f.get("file"), str)),
                     key=lambda f: f.get("severity") != "error")
    for f in flagged:
        if (os.path.basename(f["file"]), f["line"]) in sites:
            return {"file": os.path.basename(f["file"]), "line": f["line"],
                    "kind": f.get("kind"), "severity": f.get("severity")}
    return None


def mark_lint_seen(findings: list[dict[str, Any]], lint: list[dict[str, Any]]) -> None:
    """Add ``evidence.lint_before_run`` to each error or warning finding lint saw coming."""
    if not lint:
        return
    for finding in findings:
        if finding.get("severity") not in ("error", "warning"):
            continue
        seen = lint_seen(finding, lint)
        if seen is not None:
            evidence = finding.get("evidence")
            if not isinstance(evidence, dict):
                evidence = finding["evidence"] = {}
            evidence[LINT_KEY] = seen


def lint_note(finding: dict[str, Any]) -> str | None:
    """``lint saw this at train.py:37 before the run (rank_dependent_collective)``, or None."""
    evidence = finding.get("evidence")
    seen = evidence.get(LINT_KEY) if isinstance(evidence, dict) else None
    if not isinstance(seen, dict) or seen.get("file") is None:
        return None
    kind = f" ({seen['kind']})" if seen.get("kind") else ""
    return f"lint saw this at {seen['file']}:{seen.get('line')} before the run{kind}"
