"""The README's table of what ``ddpdoctor lint`` finds in the bug catalogue (a docs tool).

    python docs/tools/lint_catalogue.py

The expectations and the measurement live in ddpdoctor/lint/catalogue.py
(tests/integration/test_lint_catalogue.py holds lint to them); this prints them as markdown."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ddpdoctor.lint.catalogue import Measured, OutOfReach, measure  # noqa: E402


def markdown_table(rows: list[Measured]) -> str:
    """The README's table: bug, flagged line, kind, severity (or out of reach, and why)."""
    out = ["| bug | flagged line | kind | severity |", "| --- | --- | --- | --- |"]
    for row in rows:
        if row.hit is not None:
            out.append(f"| `{row.name}` | {row.hit.line} | `{row.hit.kind}` | "
                       f"{row.hit.severity.value} |")
        elif isinstance(row.expected, OutOfReach):
            out.append(f"| `{row.name}` | out of reach: {row.expected.reason} | | |")
        else:
            out.append(f"| `{row.name}` | not flagged (expected: {row.expected}) | | |")
    flagged = sum(r.hit is not None for r in rows)
    out.append("")
    out.append(f"{flagged} of {len(rows)} bugs flagged at the culprit line, "
               f"{sum(isinstance(r.expected, OutOfReach) for r in rows)} out of reach; "
               f"errors on fixed twins: {sum(len(r.fixed_errors) for r in rows)}.")
    return "\n".join(out)


def main() -> int:
    print(markdown_table(measure()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
