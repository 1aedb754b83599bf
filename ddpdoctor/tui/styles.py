"""What the UI calls things and how it shows them: rank states, severities, op names, durations."""

from __future__ import annotations

#: Every state a rank can be in, in the order the help screen lists them.
RANK_STATES: tuple[str, ...] = (
    "starting",
    "computing",
    "in_collective",
    "waiting",
    "hung",
    "exited",
    "failed",
    "stopped",
    "killed",
    "unreachable",
    "blocked",
    "unknown",
)

#: The Rich style of each state in the rank table.
STATE_STYLES: dict[str, str] = {
    "starting": "blue",
    "computing": "green",
    "in_collective": "cyan",
    "waiting": "yellow",
    "hung": "bold white on red",
    "exited": "dim",
    "failed": "bold red",
    "stopped": "magenta",
    "killed": "bold magenta",
    "unreachable": "bold yellow on grey23",
    "blocked": "bold yellow",
    "unknown": "dim italic",
}

#: The Rich style of each finding severity.
SEVERITY_STYLES: dict[str, str] = {
    "error": "bold white on red",
    "warning": "bold black on yellow",
    "info": "bold white on blue",
}

SEVERITY_ORDER: dict[str, int] = {"error": 0, "warning": 1, "info": 2}

#: Short names of collectives for the timeline's narrow cells.
OP_ABBREVIATIONS: dict[str, str] = {
    "all_reduce": "AR",
    "allreduce": "AR",
    "all_reduce_coalesced": "ARc",
    "broadcast": "BC",
    "all_gather": "AG",
    "all_gather_into_tensor": "AGt",
    "all_gather_object": "AGo",
    "reduce_scatter": "RS",
    "reduce_scatter_tensor": "RSt",
    "reduce": "RD",
    "gather": "GA",
    "gather_object": "GAo",
    "scatter": "SC",
    "scatter_object_list": "SCo",
    "barrier": "BR",
    "monitored_barrier": "MBR",
    "all_to_all": "A2A",
    "all_to_all_single": "A2A",
    "send": "SND",
    "recv": "RCV",
    "isend": "iSN",
    "irecv": "iRC",
    "broadcast_object_list": "BCo",
    "new_group": "NG",
}


def abbreviate_op(op: str | None) -> str:
    """A 1-3 character name for a collective, for the timeline."""
    if not op:
        return "?"
    if op in OP_ABBREVIATIONS:
        return OP_ABBREVIATIONS[op]
    parts = [p for p in op.replace("-", "_").split("_") if p]
    return "".join(p[0] for p in parts).upper()[:3] or "?"


def format_duration(seconds: float | None) -> str:
    """A compact duration: 0.4s, 12.3s, 4m05s, 2h03m."""
    if seconds is None or seconds < 0:
        return ""
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"
