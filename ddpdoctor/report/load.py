"""Load and validate a report.json written by ddpdoctor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddpdoctor.errors import UserError
from ddpdoctor.rundir.bounded import BadInput, load_json_file
from ddpdoctor.report.lint_match import mark_lint_seen
from ddpdoctor.report.schema import SCHEMA

MAX_REPORT_BYTES = 256 << 20


def validate(data: Any, path: Path) -> dict[str, Any]:
    """Check the parts of the schema every consumer relies on; raise UserError if not."""
    if not isinstance(data, dict):
        raise UserError(f"{path} is not a ddpdoctor report (a JSON object is expected)")
    if data.get("schema") != SCHEMA:
        raise UserError(f"{path} is not a ddpdoctor report (schema "
                        f"{str(data.get('schema'))[:40]!r}, expected {SCHEMA!r})")
    if not isinstance(data.get("ranks"), list) or not isinstance(data.get("findings"), list):
        raise UserError(f"{path} is a damaged ddpdoctor report (ranks or findings missing)")
    data["ranks"] = [_rank(r) for r in data["ranks"] if isinstance(r, dict)]
    data["findings"] = [_finding(f) for f in data["findings"] if isinstance(f, dict)]
    for key in ("waits", "problems", "notes", "command"):  # what every reader iterates
        value = data.get(key)
        if value is not None and not isinstance(value, list):
            data[key] = []
    data["waits"] = [w for w in data.get("waits") or [] if isinstance(w, dict)]
    for w in data["waits"]:
        if not isinstance(w.get("waits_for"), list):
            w["waits_for"] = []
    lint = data.get("lint")
    if isinstance(lint, list):  # a report written before findings said what lint saw
        mark_lint_seen(data["findings"], [f for f in lint if isinstance(f, dict)])
    return data


def _rank(rank: dict[str, Any]) -> dict[str, Any]:
    """A rank entry whose ``current`` call, when there is one, has the shape readers use."""
    current = rank.get("current")
    if not isinstance(current, dict):
        rank["current"] = None
    else:
        shapes = current.get("shapes")
        current["shapes"] = [s for s in shapes if isinstance(s, list)] \
            if isinstance(shapes, list) else []
        dtypes = current.get("dtypes")
        current["dtypes"] = [str(d) for d in dtypes] if isinstance(dtypes, list) else []
    if rank.get("stack") is not None and not isinstance(rank.get("stack"), list):
        rank["stack"] = None
    return rank


def _finding(finding: dict[str, Any]) -> dict[str, Any]:
    """A finding whose ``ranks`` and ``evidence`` have the types readers use."""
    ranks = finding.get("ranks")
    finding["ranks"] = [r for r in ranks if type(r) is int] if isinstance(ranks, list) else []
    if not isinstance(finding.get("evidence"), dict):
        finding["evidence"] = {}
    return finding


def load_report(path: Path) -> dict[str, Any]:
    """Read ``path`` as a report; every problem is a UserError with a one-line message (exit
    2): a regular file only (a link at the name the user gave is followed), its size checked
    before reading, its JSON's nesting and numbers bounded (rundir.bounded)."""
    try:
        data = load_json_file(path, MAX_REPORT_BYTES, follow=True)
    except FileNotFoundError:
        raise UserError(f"no such file: {path}") from None
    except IsADirectoryError:
        raise UserError(f"{path} is a directory, not a report.json") from None
    except BadInput as e:
        raise UserError(f"{e}: not a report") from None
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror or e}") from None
    return validate(data, path)
