"""`ddpdoctor plugins` and `ddpdoctor export`: the command line over the plugin registry."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from ddpdoctor.plugins import (ENV_ALLOW, allowed_names, load_failures, plugin_table,
                               register_plugin_commands, registered_exporters)
from ddpdoctor.terminal_text import say


def add_cli_commands(subparsers: argparse._SubParsersAction) -> None:
    """`ddpdoctor plugins`, `ddpdoctor export`, and the commands plugins add."""
    from ddpdoctor.help_format import HelpFormatter

    p = subparsers.add_parser("plugins", help="list the loaded plugins and what they add",
                              description="List the loaded plugins (built-in and installed), "
                              "their detectors and exporters, and plugins that failed.\n"
                              "Exit status: 0; 1 when a plugin failed to load.",
                              epilog="examples:\n  ddpdoctor plugins\n  ddpdoctor plugins --json",
                              formatter_class=HelpFormatter)
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.set_defaults(handler=_plugins_command)
    e = subparsers.add_parser("export", help="export a run dir to another format",
                              description="Export a run dir's traces to another format, "
                              "e.g. a Chrome/Perfetto trace (ddpdoctor-chrome-trace).\n"
                              "Exit status: 0 written; 1 when it cannot be written; 2 for an "
                              "unknown format or a run dir it cannot read.",
                              epilog="example:\n  ddpdoctor export --format chrome-trace "
                              "ddpdoctor-runs/<run>",
                              formatter_class=HelpFormatter)
    e.add_argument("--format", "-f", required=True, metavar="FORMAT",
                   help="an exporter's format (see `ddpdoctor plugins`)")
    e.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    e.add_argument("-o", "--output", type=Path, metavar="PATH",
                   help="where to write (default: a file in RUN_DIR named by the exporter)")
    e.set_defaults(handler=_export_command)
    register_plugin_commands(subparsers)


def _plugins_command(args: argparse.Namespace) -> int:
    rows = plugin_table()
    failures = load_failures()
    if args.json:
        print(json.dumps({"plugins": rows, "failures": [f.__dict__ for f in failures]},
                         indent=2))
        return 0
    from ddpdoctor.report.console import print_table
    from ddpdoctor.terminal_text import SafeConsole as Console
    from rich.table import Table

    console = Console()
    table = Table("plugin", "source", "detectors", "exporters", box=None)
    for r in rows:
        table.add_row(r["name"], r["source"], ", ".join(r["detectors"]) or "-",
                      ", ".join(r["exporters"]) or "-")
    print_table(console, table)
    allow = allowed_names()
    if allow is not None:
        console.print(f"{ENV_ALLOW}={os.environ.get(ENV_ALLOW)}: "
                      + ("no third-party plugins" if not allow else
                         f"only {', '.join(sorted(allow))}"))
    for f in failures:
        console.print(f"[red]failed[/red] {f.plugin} ({f.where}): {f.error}", highlight=False)
    return 1 if failures else 0


def _export_command(args: argparse.Namespace) -> int:
    from ddpdoctor.analysis.load.run_dirs import load_job
    from ddpdoctor.errors import UserError

    exporters = registered_exporters()
    if args.format not in exporters:
        known = ", ".join(sorted(exporters)) or "none"
        hint = (" (pip install ddpdoctor-chrome-trace)" if args.format == "chrome-trace"
                else "")
        raise UserError(f"no exporter for format {args.format!r}{hint}; known: {known}", 2)
    plugin, export = exporters[args.format]
    job = load_job([args.run_dir], live=False)
    out = args.output or args.run_dir / getattr(export, "default_filename",
                                                f"export.{args.format}.json")
    try:
        export(job, out)
    except OSError as e:
        raise UserError(f"cannot write {out}: {e.strerror or e}", 1) from None
    say(f"ddpdoctor: wrote {out} ({args.format}, by {plugin})")
    return 0
