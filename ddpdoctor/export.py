"""Built-in exporters: ``report`` (the report.json of a run dir, rebuilt offline).

Exporters are registered through the ``register_exporters`` hook; `ddpdoctor export
--format FORMAT RUN_DIR [-o PATH]` runs one.  More formats come from plugins (e.g.
``chrome-trace`` from plugins/ddpdoctor-chrome-trace).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddpdoctor.hookspecs import hookimpl


def export_report(job: Any, path: Path) -> None:
    """Write the job's report (schema ddpdoctor.report/1) to ``path``."""
    from ddpdoctor.analysis.engine import analyze_with_waits
    from ddpdoctor.rundir.layout import write_json_atomic
    from ddpdoctor.report import schema
    from ddpdoctor.report.build import infer_outcome

    findings, waits = analyze_with_waits(job)
    write_json_atomic(path, schema.build(job, findings, infer_outcome(job), waits=waits))


@hookimpl
def register_exporters(register: Any) -> None:
    register("report", export_report)
