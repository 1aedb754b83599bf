"""The `ddpdoctor` command line: parse, build a config, call one function per command."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from ddpdoctor import __version__
from ddpdoctor.config import HANG_TIMEOUT, KEEP_RUNS, WAIT_BOUND_FACTOR
from ddpdoctor.errors import UserError
from ddpdoctor.help_format import HelpFormatter
from ddpdoctor.proc.signals import exit_status, say_to_stderr, signal_of, silence_closed_output

EXIT_USAGE = 2
EXIT_FINDING = 1  # a diagnosing command (analyze, attach, lint) found an error
# the one exit rule of the diagnosing commands, in each one's --help
EXIT_DIAGNOSING = ("Exit status: 0 no finding of severity error, 1 at least one, 2 usage error\n"
                   "or unreadable input.")
# torchrun options that `ddpdoctor run` passes through to torch's launcher (name, takes value)
LAUNCHER_OPTIONS = (("--nnodes", True), ("--node-rank", True), ("--rdzv-endpoint", True),
                    ("--rdzv-backend", True), ("--rdzv-id", True), ("--rdzv-conf", True),
                    ("--max-restarts", True), ("--master-addr", True),
                    ("--master-port", True), ("--monitor-interval", True),
                    ("--standalone", False))


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line and exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UserError(f"{message} (see `{self.prog} --help`)", EXIT_USAGE)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def _keep(text: str) -> int | None:
    if text == "all":
        return None
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a number of runs (1 or more) or all: {text!r}")
    return int(text)


def _add_run(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run", help="run a DDP job under ddpdoctor",
        description="Run COMMAND with every rank instrumented; on a hang or a failure, "
        "capture every rank's stack,\nname the root cause and write a JSON report. The "
        "script is linted first (notices only).\n"
        "Exit status: the job's own when it ends by itself (with --fail-on: 1 when it "
        "exited 0\nbut a finding of that severity was named); 124 when ddpdoctor stopped "
        "a hung job;\n128+N when stopped by signal N (130 for Ctrl-C, 143 SIGTERM, 129 "
        "SIGHUP); 141 when its\noutput was closed; 70 when ddpdoctor's own error stopped the "
        "job; 2 usage error.",
        epilog="examples:\n  ddpdoctor run --nproc-per-node 4 train.py --lr 0.1\n"
        "  ddpdoctor run -- torchrun --nproc-per-node 4 train.py\n"
        "  ddpdoctor run -- python train_spawn.py\n"
        "  ddpdoctor run --ui --nproc-per-node 4 train.py\n"
        "  ddpdoctor run --fail-on warning --nproc-per-node 2 train.py   # in CI\n"
        "  ddpdoctor run --keep 5 --nproc-per-node 2 train.py",
        formatter_class=HelpFormatter)
    p.add_argument("--nproc-per-node", type=int, metavar="N",
                   help="ranks on this node, when COMMAND is a script (started through "
                   "torch.distributed.run)")
    p.add_argument("--hang-timeout", type=_positive_float, default=HANG_TIMEOUT, metavar="SECONDS",
                   help="ranks waiting this long (in a collective, a p2p op or the "
                   "rendezvous) on ranks that make no progress mean the job hangs; a rank "
                   "still computing is a straggler (default: %(default)g)")
    p.add_argument("--wait-bound", type=_positive_float, default=None, metavar="SECONDS",
                   help="every wait has a bound: a rank that keeps working outside any "
                   "collective (computing, polling, sleeping, retrying) while the others wait "
                   "on it is hung once they have waited this long; set it above your longest "
                   f"solo step, a save or an evaluation on one rank (default: "
                   f"{WAIT_BOUND_FACTOR} x --hang-timeout, {WAIT_BOUND_FACTOR * HANG_TIMEOUT:g} s)")
    p.add_argument("--on-hang", choices=("stop", "wait"), default="stop",
                   help="stop: write the report, then stop every rank (exit 124); wait: "
                   "write the report and leave the job running (default: stop)")
    p.add_argument("--report", type=Path, metavar="PATH",
                   help="where the JSON report goes (default: RUN_DIR/report.json)")
    p.add_argument("--run-dir", type=Path, metavar="DIR",
                   help="where traces, stacks and reports go "
                   "(default: ./ddpdoctor-runs/<time>-<id>)")
    p.add_argument("--ddp", choices=("ring", "torch"), default="ring",
                   help="ring: the script's DistributedDataParallel runs with ddpdoctor's "
                   "instrumented ring all-reduce as its comm hook; torch: torch's DDP as it "
                   "is, its bucket all-reduces recorded as they are issued (default: ring)")
    p.add_argument("--ui", action="store_true", help="show the live terminal UI (on a "
                   "terminal; elsewhere the console summary, said so)")
    _add_shown(p, "the report as JSON on stdout, nothing else there (notices stay on stderr)")
    p.add_argument("--fail-on", choices=("error", "warning", "never"), default="never",
                   help="for CI: exit 1 when the job itself exited 0 but a finding of this "
                   "severity or worse was named (a drift error, a data warning); the job's "
                   "own non-zero status, 124 and 128+N stand as they are (default: never)")
    p.add_argument("--keep", type=_keep, default=KEEP_RUNS, metavar="N",
                   help="when the run goes to ./ddpdoctor-runs, keep its newest N runs (this "
                   "one included) and remove the older ones ddpdoctor named; never a live "
                   "run nor a --run-dir you named; `all` keeps every run (default: "
                   f"{KEEP_RUNS}; `ddpdoctor runs` lists them)")
    p.add_argument("--doctor-store", metavar="HOST:PORT",
                   help="many nodes: where the nodes' supervisors meet (node 0 hosts a "
                   "channel there; default: the rendezvous host, its port + 1)")
    p.add_argument("--node-secret-file", type=Path, metavar="PATH",
                   help="many nodes: a file of yours (mode 600) holding the secret every "
                   "node is given alike (else DDPDOCTOR_STORE_SECRET)")
    p.add_argument("--insecure-node-channel", action="store_true",
                   help="many nodes without a secret: anyone who reaches node 0's port can "
                   "speak for any node")
    launcher = p.add_argument_group("passed to torch.distributed.run (script form)")
    for name, takes_value in LAUNCHER_OPTIONS:
        if takes_value:
            launcher.add_argument(name, dest="launch_" + name[2:].replace("-", "_"),
                                  metavar="V")
        else:
            launcher.add_argument(name, dest="launch_" + name[2:].replace("-", "_"),
                                  action="store_true")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND [ARGS...]",
                   help="the script (with --nproc-per-node) or the full command after --")


def _add_shown(p: argparse.ArgumentParser, json_help: str) -> None:
    """--quiet and --json: what stdout gets (the summary by default)."""
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--quiet", "-q", action="store_true",
                       help="print only the verdict line and the report's path")
    shown.add_argument("--json", action="store_true", help=json_help)


def _shown(args: argparse.Namespace) -> str:
    return "json" if getattr(args, "json", False) else \
        "quiet" if getattr(args, "quiet", False) else "summary"


def _pid(text: str) -> int:
    if not text.isdigit() or int(text) <= 0:
        raise argparse.ArgumentTypeError(f"not a PID: {text!r}")
    return int(text)


def _add_attach(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "attach", help="diagnose a running job that was not started under ddpdoctor",
        description="Find the ranks of a running job on this node (the children of a "
        "torchrun agent,\nor processes with RANK and WORLD_SIZE in their environment), "
        "sample every rank's stack\nwith py-spy, read any torch flight recorder dumps the "
        "job wrote, name the root cause\nand write the same report as `ddpdoctor run`. The "
        "job is left running unless --stop.\n" + EXIT_DIAGNOSING,
        epilog="examples:\n  ddpdoctor attach            # the one job on this node\n"
        "  ddpdoctor attach 4242       # the job of this torchrun (or rank) PID\n"
        "  ddpdoctor attach --stop     # diagnose, then stop the whole job\n"
        "  ddpdoctor attach --json     # the report alone on stdout, for a script",
        formatter_class=HelpFormatter)
    p.add_argument("pids", nargs="*", type=_pid, metavar="PID",
                   help="the job's launcher or rank PIDs (default: find the job)")
    p.add_argument("--report", type=Path, metavar="PATH",
                   help="where the JSON report goes (default: RUN_DIR/report.json)")
    p.add_argument("--run-dir", type=Path, metavar="DIR",
                   help="where stacks and the report go "
                   "(default: ./ddpdoctor-runs/<time>-<id>-attach)")
    p.add_argument("--ui", action="store_true", help="open the terminal UI on the report")
    p.add_argument("--stop", action="store_true",
                   help="after the report, stop the whole job (launcher and ranks: SIGTERM, "
                   "then SIGKILL after 5 s) and say which PIDs, on stderr")
    _add_shown(p, "the report as JSON on stdout, nothing else there (notices stay on stderr)")


def _add_lint(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "lint", help="find collectives that only some ranks reach, before the job runs",
        description="Static analysis of Python source (never imported or run): collectives, "
        "explicit and implicit,\nthat depend on the rank, on rank-local data or on the file "
        "system, skips around them,\nand the silent bugs visible in the source.\n"
        + EXIT_DIAGNOSING,
        epilog="examples:\n  ddpdoctor lint train.py\n  ddpdoctor lint --format json src/",
        formatter_class=HelpFormatter)
    p.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                   help="Python files, or directories searched for *.py")
    p.add_argument("--format", choices=("text", "json"), default="text",
                   help="text (default) or json (schema ddpdoctor.lint/1)")


def _add_repro(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "repro", help="write a standalone script that replays a run's collectives",
        description="Write one standalone Python script that replays every rank's recorded "
        "collectives\n(same groups, ops, shapes, dtypes, roots and peers, zero-filled tensors) "
        "up to where\nthe job hung or failed. It needs torch only.\nExit status: 0 written, "
        "2 for a run dir it cannot read.",
        epilog="examples:\n  ddpdoctor repro ddpdoctor-runs/<run>\n"
        "  ddpdoctor repro ddpdoctor-runs/<run> -o hang_repro.py\n"
        "  ddpdoctor run --hang-timeout 5 --nproc-per-node 2 hang_repro.py",
        formatter_class=HelpFormatter)
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    p.add_argument("-o", "--output", type=Path, metavar="FILE",
                   help="where the script goes (default: RUN_DIR/repro.py)")


def _add_analyze(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "analyze", help="rebuild a report offline (run dirs, flight recorder dumps, a report)",
        description="Rebuild the report from run dirs, offline, and print its summary. Several "
        "run dirs (one\nper node, or one per `attach`) merge into one job. A directory of "
        "torch flight recorder\ndumps (JSON, one file per rank) is a run dir too; a "
        "report.json is read and summed up\nas it is (what `ddpdoctor ui` takes, analyze "
        "takes).\n" + EXIT_DIAGNOSING,
        epilog="examples:\n  ddpdoctor analyze ddpdoctor-runs/<run>\n"
        "  ddpdoctor analyze ddpdoctor-runs/<node0> ddpdoctor-runs/<node1>\n"
        "  ddpdoctor analyze fr_dumps/            # torch flight recorder dumps\n"
        "  ddpdoctor analyze ddpdoctor-runs/<run>/report.json --json",
        formatter_class=HelpFormatter)
    p.add_argument("run_dirs", nargs="+", type=Path, metavar="PATH",
                   help="run dirs, flight recorder dump dirs, or one report.json")
    p.add_argument("--report", type=Path, metavar="PATH",
                   help="where to write the report (default: RUN_DIR/report.analyzed.json)")
    _add_shown(p, "print the report as JSON, nothing else")


def _add_ui(sub: argparse._SubParsersAction) -> None:
    from ddpdoctor.tui.keys import keys_help

    p = sub.add_parser(
        "ui", help="open the terminal UI on a run dir or a report.json",
        description="Show a run in the terminal UI: the ranks, the collective timeline, the "
        "findings,\neach rank's stack, who waits for whom. PATH is a run dir (live: it "
        "follows the job;\nfinished) or a report.json.\nExit status: 0 after q, 2 for a "
        "path that is not a run dir or a report.",
        epilog="keys:\n" + keys_help() + "\n\nexamples:\n  ddpdoctor ui ddpdoctor-runs/<run>\n"
        "  ddpdoctor ui ddpdoctor-runs/<run>/report.json",
        formatter_class=HelpFormatter)
    p.add_argument("path", type=Path, metavar="PATH", help="a run dir or a report.json")


def _add_bugs(sub: argparse._SubParsersAction) -> None:
    b = sub.add_parser(
        "bugs", help="the catalogue of reproducible DDP bugs",
        description="The catalogue of real DDP bugs in sample_bugs/, each with its fixed "
        "twin and what\nddpdoctor must report (kind, ranks blamed).\nExit status: list and "
        "show 0; run: the run's own (as `ddpdoctor run`); 2 for an\nunknown bug name.",
        epilog="examples:\n  ddpdoctor bugs list\n  ddpdoctor bugs show metric_rank0_only\n"
        "  ddpdoctor bugs run metric_rank0_only\n  ddpdoctor bugs run metric_rank0_only --fixed",
        formatter_class=HelpFormatter)
    bsub = b.add_subparsers(dest="bugs_cmd", metavar="ACTION", parser_class=_Parser)
    bl = bsub.add_parser("list", help="one line a bug, grouped by what ddpdoctor reports",
                         description="List the bugs, one line each, grouped by the finding "
                         "ddpdoctor reports.\nExit status: 0.",
                         epilog="examples:\n  ddpdoctor bugs list\n  ddpdoctor bugs list -v",
                         formatter_class=HelpFormatter)
    bl.add_argument("-v", "--verbose", action="store_true",
                    help="every bug in full: symptom, finding, ranks blamed, fix, source")
    bs = bsub.add_parser("show", help="one bug in full",
                         description="One bug in full: symptom, launch, what ddpdoctor "
                         "reports, the fix and where\nthe bug comes from.\nExit status: 0; 2 "
                         "for an unknown name.",
                         epilog="example:\n  ddpdoctor bugs show early_stop_per_rank",
                         formatter_class=HelpFormatter)
    bs.add_argument("name", metavar="NAME")
    br = bsub.add_parser("run", help="run a bug (or its fix) under ddpdoctor",
                         description="Run a bug's script (or its fixed twin) from sample_bugs/ "
                         "under `ddpdoctor run`.\nExit status: the run's own (124 for a "
                         "hang ddpdoctor stopped); 2 for an unknown name.",
                         epilog="examples:\n  ddpdoctor bugs run metric_rank0_only\n"
                         "  ddpdoctor bugs run metric_rank0_only --fixed\n"
                         "  ddpdoctor bugs run metric_rank0_only --repro",
                         formatter_class=HelpFormatter)
    br.add_argument("name", metavar="NAME")
    br.add_argument("--fixed", action="store_true", help="run the fixed twin")
    br.add_argument("--repro", action="store_true",
                    help="after the run, write the repro script of its run dir and print it")
    br.add_argument("extra", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


def _command(parent: argparse._SubParsersAction, name: str, summary: str, description: str,
             *examples: str) -> argparse.ArgumentParser:
    """A (sub)command's parser: its one-line help, its description (ending with its exit
    status) and its examples."""
    return parent.add_parser(name, help=summary, description=description,
                             epilog="examples:\n" + "\n".join(f"  {e}" for e in examples),
                             formatter_class=HelpFormatter)


def _add_runs(sub: argparse._SubParsersAction) -> None:
    folder = {"nargs": "?", "type": Path, "metavar": "FOLDER",
              "help": "the folder of runs (default: ./ddpdoctor-runs)"}
    r = _command(sub, "runs", "list the runs in ./ddpdoctor-runs, and prune them",
                 "List the runs of a runs folder, newest first: when each started, its "
                 "outcome, its size\non disk, its run dir and its command; or prune them. "
                 "Live runs are never removed, nor\nrun dirs you named with --run-dir, nor "
                 "anything outside the folder.\nExit status: 0; prune: 1 when a run could not "
                 "be removed; 2 usage error.",
                 "ddpdoctor runs", "ddpdoctor runs prune --keep 5 --dry-run",
                 "ddpdoctor runs prune --older-than 7d",
                 "ddpdoctor runs list /scratch/ddpdoctor-runs")
    actions = r.add_subparsers(dest="runs_cmd", metavar="ACTION", parser_class=_Parser)
    _command(actions, "list", "the runs, newest first (what `ddpdoctor runs` does)",
             "The runs, newest first: started, outcome, size on disk, run dir, command.\n"
             "Exit status: 0; 2 for a folder that is not a directory.",
             "ddpdoctor runs list", "ddpdoctor runs list /scratch/ddpdoctor-runs"
             ).add_argument("folder", **folder)
    rp = _command(actions, "prune", "remove old runs: --keep N or --older-than AGE",
                  "Remove the runs past the newest N, or older than AGE. Only run dirs "
                  "ddpdoctor\nnamed, directly in the folder; never a live run.\nExit status: "
                  "0; 1 when a run could not be removed; 2 usage error.",
                  "ddpdoctor runs prune --keep 5 --dry-run", "ddpdoctor runs prune --keep 5",
                  "ddpdoctor runs prune --older-than 7d   # also 12h, 90m, 2w")
    rp.add_argument("folder", **folder)
    rp.add_argument("--keep", type=int, metavar="N", help="keep the newest N runs")
    rp.add_argument("--older-than", metavar="AGE",
                    help="remove the runs started more than AGE ago (30d, 12h, 90m, 2w)")
    rp.add_argument("--dry-run", action="store_true",
                    help="say which runs would go, remove none")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ddpdoctor", description="Find out why a PyTorch DDP job hangs, "
                     "crashes or silently trains wrong.",
                     epilog="examples:\n  ddpdoctor run --nproc-per-node 2 train.py\n"
                     "  ddpdoctor ui ddpdoctor-runs/<run>\n  ddpdoctor lint train.py\n"
                     "`ddpdoctor COMMAND --help` says what each command does and its exit "
                     "status.", formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"ddpdoctor {__version__}")
    sub = parser.add_subparsers(dest="cmd", metavar="COMMAND", parser_class=_Parser)
    _add_run(sub)
    _add_analyze(sub)
    _add_attach(sub)
    _add_lint(sub)
    _add_repro(sub)
    _add_ui(sub)
    _add_bugs(sub)
    _add_runs(sub)
    _add_plugin_commands(sub)
    return parser


def _add_plugin_commands(sub: argparse._SubParsersAction) -> None:
    try:
        from ddpdoctor.plugin_commands import add_cli_commands
    except ImportError:
        return
    add_cli_commands(sub)


def _run(args: argparse.Namespace) -> int:
    from ddpdoctor.config import DdpMode, FailOn, OnHang, RunConfig, Shown
    from ddpdoctor.host import apply_clock_shift
    from ddpdoctor.launch.run import run_job

    apply_clock_shift()  # tests of skewed hosts only

    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UserError("no command to run: give a script (with --nproc-per-node) or "
                        "`-- COMMAND ...` (see `ddpdoctor run --help`)", EXIT_USAGE)
    launcher_args: list[str] = []
    for name, takes_value in LAUNCHER_OPTIONS:
        value = getattr(args, "launch_" + name[2:].replace("-", "_"))
        if takes_value and value is not None:
            launcher_args += [name, str(value)]
        elif not takes_value and value:
            launcher_args.append(name)
    if launcher_args and args.nproc_per_node is None:
        raise UserError(f"{launcher_args[0]} needs --nproc-per-node and a script (or put it "
                        "in your own torchrun command after --)", EXIT_USAGE)
    config = RunConfig(tuple(command), args.nproc_per_node, args.hang_timeout,
                       OnHang(args.on_hang), args.report, args.run_dir, DdpMode(args.ddp),
                       args.ui, tuple(launcher_args), args.doctor_store,
                       args.node_secret_file, args.insecure_node_channel, args.wait_bound,
                       FailOn(args.fail_on), args.keep, Shown(_shown(args)))
    return run_job(config)


def _analyze(args: argparse.Namespace) -> int:
    from ddpdoctor.report.console import show_report, summary_console

    report, path = _analyzed_report(list(args.run_dirs), args.report)
    show_report(report, path, summary_console(), _shown(args))
    if _shown(args) == "summary":
        if report.get("attempts"):
            from ddpdoctor.report.attempts import describe_attempts

            print(f"ddpdoctor: {describe_attempts(report['attempts'])}")
    return diagnosis_exit_code(report)


def diagnosis_exit_code(report: dict) -> int:
    """The diagnosing commands' one rule: 1 when a finding is an error, else 0."""
    errors = [f for f in report.get("findings") or []
              if isinstance(f, dict) and f.get("severity") == "error"]
    return EXIT_FINDING if errors else 0


def _analyzed_report(paths: list[Path], report_path: Path | None) -> tuple[dict, Path]:
    """The report of ``paths``: a report.json read as it is, or run dirs rebuilt (and the
    rebuilt report written); bad input is a UserError (exit 2)."""
    from ddpdoctor.report.attempts import analyze_attempts
    from ddpdoctor.report.build import build_report
    from ddpdoctor.report.load import load_report
    from ddpdoctor.rundir.layout import write_json_atomic

    files = [p for p in paths if p.is_file()]
    if files:
        if len(paths) > 1:
            raise UserError(f"{files[0]} is a file: give one report.json alone, or run dirs "
                            "to merge", EXIT_USAGE)
        return load_report(files[0]), files[0]
    attempts = analyze_attempts(paths[0]) if len(paths) == 1 else None
    if attempts is not None:
        report, per_attempt = attempts
        for attempt_path, attempt_report in per_attempt:
            try:
                write_json_atomic(attempt_path, attempt_report)
            except OSError as e:
                raise UserError(f"cannot write {attempt_path}: {e.strerror or e}") from None
    else:
        report = build_report(paths, live=False)
    if not report["ranks"] and report.get("problems"):
        raise UserError(f"no readable rank trace in {', '.join(map(str, paths))}: "
                        f"{report['problems'][0]}")
    path = report_path or paths[0] / "report.analyzed.json"
    try:
        write_json_atomic(path, report)
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror or e}; choose another with "
                        "--report") from None
    from ddpdoctor.analysis.load.fr_dumps import EXIT_BAD_INPUT, NOTHING_PENDING

    if NOTHING_PENDING in (report.get("problems") or []) and not report.get("findings"):
        raise UserError(f"{NOTHING_PENDING} (report: {path})", EXIT_BAD_INPUT)
    return report, path


def _attach(args: argparse.Namespace) -> int:
    from ddpdoctor.attach.command import AttachConfig, run_attach

    if args.ui and _shown(args) != "summary":
        raise UserError("--ui shows the report in the terminal UI: drop --quiet or --json",
                        EXIT_USAGE)
    return run_attach(AttachConfig(tuple(args.pids), args.report, args.run_dir, args.ui,
                                   args.stop, shown=_shown(args)))


def _lint(args: argparse.Namespace) -> int:
    from ddpdoctor.lint.command import run_lint

    return run_lint(list(args.paths), args.format)


def _repro(args: argparse.Namespace) -> int:
    from ddpdoctor.repro.command import run_repro

    return run_repro(args.run_dir, args.output)


def _ui(args: argparse.Namespace) -> int:
    from ddpdoctor.tui.app import run_ui

    return run_ui(args.path)


def _bugs(args: argparse.Namespace) -> int:
    from ddpdoctor import bugs
    from ddpdoctor.report.console import summary_console

    if args.bugs_cmd == "run":
        extra = [a for a in args.extra if a != "--"]
        return bugs.run_bug(args.name, args.fixed, extra, repro=args.repro)
    if args.bugs_cmd == "show":
        return bugs.show_bug(args.name, summary_console())
    return bugs.list_bugs(summary_console(), verbose=bool(getattr(args, "verbose", False)))


def _runs(args: argparse.Namespace) -> int:
    from ddpdoctor.rundir.command import list_command, prune_command

    if args.runs_cmd == "prune":
        return prune_command(args.folder, args.keep, args.older_than, args.dry_run)
    return list_command(getattr(args, "folder", None))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: returns the exit status (the console script passes it to sys.exit)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.cmd is None:
            parser.print_help()
            return EXIT_USAGE
        handlers = {"run": _run, "analyze": _analyze, "attach": _attach,
                    "ui": _ui, "bugs": _bugs, "lint": _lint, "repro": _repro, "runs": _runs}
        handler = handlers.get(args.cmd) or getattr(args, "handler", None)
        if handler is None:
            parser.print_help()
            return EXIT_USAGE
        return int(handler(args) or 0)
    except UserError as e:
        say_to_stderr(f"ddpdoctor: {e}")
        return e.exit_code
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM/SIGHUP during `run`
        say_to_stderr("ddpdoctor: interrupted")
        return exit_status(signal_of(e))
    except BrokenPipeError:
        return 1
    finally:
        silence_closed_output()  # no failing last flush (exit 120) into a closed pipe


if __name__ == "__main__":
    sys.exit(main())
