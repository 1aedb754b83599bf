"""LintFinding: one problem found in the source, and its JSON form (schema ddpdoctor.lint/1)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ddpdoctor.kinds import Severity  # noqa: F401 (lint's severities are the report's)

SCHEMA = "ddpdoctor.lint/1"
IGNORE_COMMENT = re.compile(r"#\s*ddpdoctor:\s*ignore(?:\[([A-Za-z0-9_,\s-]*)\])?")


@dataclass(frozen=True)
class Condition:
    """The source line that makes ranks take different paths (an `if`, a loop header)."""

    file: str
    line: int
    source: str

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "source": self.source}


@dataclass(frozen=True)
class LintFinding:
    """One finding of ``ddpdoctor lint``.

    Args:
        kind: what the problem is (a rule's name, e.g. ``rank_dependent_collective``).
        severity: error, warning or info.
        file: the file, as it was given (or found under a directory given).
        line: the collective's line, or the call that leads to one, or the jump that skips one.
        collective: the collective (or API) concerned, e.g. ``barrier``.
        condition: the condition that makes ranks differ, or None.
        message: one line.
        fix: what to change.
    """

    kind: str
    severity: Severity
    file: str
    line: int
    collective: str
    condition: Condition | None
    message: str
    fix: str

    def as_dict(self) -> dict[str, Any]:
        """The finding as CONTRACT.md's lint JSON writes it."""
        return {"kind": self.kind, "severity": self.severity.value, "file": self.file,
                "line": self.line, "collective": self.collective,
                "condition": self.condition.as_dict() if self.condition else None,
                "message": self.message, "fix": self.fix}


def ignored(line_text: str, kind: str) -> bool:
    """True when ``# ddpdoctor: ignore[KIND]`` (or a bare ``# ddpdoctor: ignore``) is on the line."""
    match = IGNORE_COMMENT.search(line_text)
    if match is None:
        return False
    if match.group(1) is None:
        return True
    return kind in {k.strip() for k in match.group(1).split(",")}
