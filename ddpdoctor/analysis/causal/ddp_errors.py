"""DDP's own errors in plain words: the reducer's parameter indices named by module path,
and the construction check's mismatch named by the odd rank and what differs.

torch's messages are read by their stable parts only (the indices line, the count and
size clauses), never as whole texts."""

from __future__ import annotations

import enum
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ddpdoctor.analysis.causal.state import RankState
from ddpdoctor.analysis.model import FindingKind, Finding, JobView, RankRun, Severity
from ddpdoctor.trace.meta_line import traceback_frames

UNFINISHED = re.compile(r"^Expected to have finished reduction in the prior iteration")
INDICES = re.compile(r"^Parameter indices which did not receive grad for rank (\d+): "
                     r"([\d ]+)$", re.M)
NAMES = re.compile(r"^Parameters which did not receive grad for rank (\d+): (.+)$", re.M)
READY_ONCE = re.compile(r"^Expected to mark a variable ready only once")
READY_TWICE = re.compile(r"Parameter at index (\d+)(?: with name (\S+))? has been marked as "
                         r"ready twice")
SAME_MODEL = re.compile(r"^DDP expects same model across all ranks, but Rank (\d+) has "
                        r"(\d+) params")
PARAM_SIZES = re.compile(r"^\[(\d+)\]: params\[(\d+)\] in this process with (sizes|strides) "
                         r"(\[[\d, ]*\]) appears not to match")
CHECKPOINT_FILE = "torch/utils/checkpoint.py"
REDUCER_ERROR_TYPE = "RuntimeError"  # torch's reducer checks raise RuntimeError

UNUSED_FIX_SOME = (
    "Make every rank use these parameters every iteration (the branch that skips them "
    "decides per rank: on its own data), e.g. add `0.0 * out.sum()` of the skipped module "
    "to the loss when the branch is not taken; or pass find_unused_parameters=True to DDP "
    "(it then searches the autograd graph for unused parameters each iteration).")
UNUSED_FIX_ALL = (
    "Pass find_unused_parameters=True to DDP; if these parameters are never used, remove "
    "them from the model or freeze them (requires_grad_(False)) before wrapping it in DDP; "
    "if the same parameters go unused every iteration, static_graph=True handles them "
    "without the per-iteration search.")
CHECKPOINT_FIX = (
    "Use non-reentrant activation checkpointing: torch.utils.checkpoint.checkpoint(..., "
    "use_reentrant=False), which DDP supports (torch recommends it); or pass "
    "static_graph=True to DDP if the model's graph is the same every iteration.")
CHECKPOINT_UNUSED_FIX = (
    "Use non-reentrant activation checkpointing: torch.utils.checkpoint.checkpoint(..., "
    "use_reentrant=False), which DDP supports with find_unused_parameters=True (torch "
    "recommends it); or drop find_unused_parameters=True if every parameter is used every "
    "iteration; or pass static_graph=True to DDP if the model's graph is the same every "
    "iteration.")
READY_TWICE_FIX = (
    "A parameter took part in two backward passes of one iteration (shared, or used again "
    "after a first backward): pass static_graph=True to DDP if the graph is the same every "
    "iteration, or run the first backward under ddp.no_sync().")
IF_CHECKPOINTED = (" If this module is checkpointed with torch.utils.checkpoint "
                   "(use_reentrant=True), use use_reentrant=False instead.")
CHECKPOINT_WHY = (
    "A reentrant activation checkpoint (torch.utils.checkpoint with use_reentrant=True) runs "
    "its module's forward under no_grad and, in backward, re-runs that forward and a nested "
    "backward pass over it; DDP counts each parameter ready once per iteration, so a module "
    "checkpointed twice in one iteration (a shared layer, the same block under two "
    "checkpoint calls) is marked ready once per nested pass.")
CHECKPOINT_UNUSED_WHY = (
    "A reentrant activation checkpoint (torch.utils.checkpoint with use_reentrant=True) runs "
    "its module's forward under no_grad, so find_unused_parameters=True's search of the "
    "autograd graph at the end of the forward does not see its parameters and marks them "
    "ready as unused; in backward the checkpoint re-runs the forward and a nested backward "
    "pass, which marks them ready again.")
READY_TWICE_WHY = (
    "DDP reduces each parameter's gradient once per iteration; a second gradient for the "
    "same parameter in that iteration (a parameter shared across two forward-backward "
    "passes, or a nested backward) breaks its count.")


class Checkpointed(str, enum.Enum):
    """Did a reentrant activation checkpoint run the backward that raised?

    YES: the traceback passes through torch.utils.checkpoint's backward (CheckpointFunction,
    the reentrant one, runs a nested backward there).  NO: a traceback without that frame.
    UNKNOWN: no traceback was recorded."""

    YES = "yes"
    NO = "no"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class ReducerError:
    """A reducer error of one rank: which parameters, named by module path where known."""

    rank: int
    mechanism: str  # "no_grad" (prior reduction unfinished) | "ready_twice"
    indices: tuple[int, ...]
    names: tuple[str, ...]
    iteration: int | None  # 0-based, by optimizer steps: the iteration that left them
    checkpoint: Checkpointed
    module: str = ""  # the module holding the parameters (ready_twice), "" when unknown
    module_params: tuple[str, ...] = ()  # that module's reduced parameters
    find_unused: bool | None = None  # DDP's find_unused_parameters, None when not recorded


def _message(run: RankRun) -> tuple[str, list[dict[str, Any]]]:
    exc = run.exception() or {}
    frames = traceback_frames(exc)
    return str(exc.get("message") or ""), frames


def parameter_table(run: RankRun) -> dict[str, Any] | None:
    """The rank's newest DDP parameter table (ddp/swap.py records one per DDP built)."""
    found = run.trace.meta_events("ddp_params")
    return found[-1] if found else None


def _named(table: dict[str, Any] | None, indices: tuple[int, ...]) -> tuple[str, ...] | None:
    """The reducer's indices named by the table recorded at DDP construction."""
    order = (table or {}).get("reducer") or []
    if not all(0 <= i < len(order) for i in indices):
        return None
    return tuple(str(order[i]) for i in indices)


def checkpointed(frames: list[dict[str, Any]]) -> Checkpointed:
    """A reentrant checkpoint's nested backward is in the traceback: a frame of
    torch/utils/checkpoint.py in ``backward`` (the non-reentrant one recomputes in a
    saved-tensor hook and gives DDP one backward pass)."""
    if not frames:
        return Checkpointed.UNKNOWN
    return Checkpointed.YES if any(
        str(f.get("filename", "")).replace("\\", "/").endswith(CHECKPOINT_FILE) and
        f.get("name") == "backward" for f in frames) else Checkpointed.NO


def owning_module(name: str, table: dict[str, Any] | None) -> tuple[str, tuple[str, ...]]:
    """The module path of parameter ``name`` and that module's reduced parameters, by the
    table recorded at DDP construction (only the name's own module without a table)."""
    module = name.rpartition(".")[0]
    order = [str(n) for n in (table or {}).get("reducer") or []]
    siblings = tuple(n for n in order if n.rpartition(".")[0] == module)
    return module, siblings or (name,)


def reducer_error(run: RankRun) -> ReducerError | None:
    """The reducer error this rank raised, if its exception is one: recognised by the error
    class and the stable first sentence of torch's message, its indices named by the
    parameter table the rank recorded at DDP construction."""
    exc = run.exception() or {}
    if str(exc.get("type") or "").rpartition(".")[2] != REDUCER_ERROR_TYPE:
        return None
    msg, frames = _message(run)
    table = parameter_table(run)
    checkpoint = checkpointed(frames)
    find_unused = ((table or {}).get("options") or {}).get("find_unused_parameters")
    steps = max(int(run.header.step), 0)
    if UNFINISHED.search(msg):
        m = INDICES.search(msg)
        indices = tuple(int(i) for i in m.group(2).split()) if m else ()
        named = NAMES.search(msg)
        names = _named(table, indices) or \
            (tuple(n.strip() for n in named.group(2).split(",")) if named else
             tuple(f"parameter #{i}" for i in indices))
        return ReducerError(run.rank, "no_grad", indices, names,
                            steps - 1 if steps else None, checkpoint, find_unused=find_unused)
    m = READY_TWICE.search(msg)
    if m and READY_ONCE.search(msg):
        index = int(m.group(1))
        names = _named(table, (index,)) or ((m.group(2),) if m.group(2) else
                                             (f"parameter #{index}",))
        module, siblings = owning_module(names[0], table) if m.group(2) or table else ("", ())
        return ReducerError(run.rank, "ready_twice", (index,), names, steps, checkpoint,
                            module, siblings, find_unused)
    return None


def _ticked(names: tuple[str, ...]) -> str:
    shown = ", ".join(f"`{n}`" for n in names[:8])
    return shown + (f" and {len(names) - 8} more" if len(names) > 8 else "")


def _ready_twice(errors: list[ReducerError], ranks_said: str, when: str,
                 where: str) -> tuple[str, str, str]:
    """(summary, why, fix) of parameters marked ready twice: the reentrant checkpoint's
    mechanism and fix when its frame is in the traceback, the general one when the traceback
    shows none, and the general one with the checkpoint's fix as a condition when no
    traceback was recorded."""
    first = errors[0]
    names = tuple(dict.fromkeys(n for e in errors for n in e.names))
    holder = ""
    if first.module:
        others = [n for n in first.module_params if n not in names]
        holder = f" (module `{first.module}`" + \
            (f", with {_ticked(tuple(others))}" if others else "") + ")"
    at = f" (raised in backward at {where})" if where else ""
    said = f"parameter {_ticked(names)}{holder} was marked ready twice on {ranks_said}{when}"
    states = {e.checkpoint for e in errors}
    if Checkpointed.YES in states:
        unused = any(e.find_unused for e in errors)
        before = ("find_unused_parameters=True had marked them ready as unused at the end of "
                  "the forward (its search does not see into the checkpoint), and the nested "
                  "backward pass marked them again" if unused else
                  "its nested backward pass marked them ready a second time in this "
                  "iteration (the same module checkpointed twice, or also used outside the "
                  "checkpoint)")
        summary = (f"{said}, because the reentrant activation checkpoint (use_reentrant=True) "
                   f"re-ran the forward in backward: {before}{at}")
        return (summary, CHECKPOINT_UNUSED_WHY if unused else CHECKPOINT_WHY,
                CHECKPOINT_UNUSED_FIX if unused else CHECKPOINT_FIX)
    summary = f"{said}: it got a gradient from two backward passes{at}"
    fix = READY_TWICE_FIX + (IF_CHECKPOINTED if Checkpointed.UNKNOWN in states else "")
    return summary, READY_TWICE_WHY, fix


def reducer_finding(errors: list[ReducerError], base: Finding, job: JobView,
                    where: str = "") -> Finding:
    """One rank_failed finding for ranks that raised the same reducer error: the
    parameters by name, the ranks, the iteration, the mechanism and the fix that fits."""
    from ddpdoctor.analysis.model import ranks_text

    ranks = tuple(sorted(e.rank for e in errors))
    names = tuple(dict.fromkeys(n for e in errors for n in e.names))
    iters = sorted({e.iteration for e in errors if e.iteration is not None})
    when = f" in iteration {iters[0]}" if len(iters) == 1 else \
        (f" in iterations {', '.join(map(str, iters))}" if iters else "")
    first = errors[0]
    checkpoint = any(e.checkpoint is Checkpointed.YES for e in errors)
    if first.mechanism == "ready_twice":
        summary, why, fix = _ready_twice(errors, ranks_text(ranks), when, where)
        summary = f"DDP's reducer: {summary}"
    else:
        some = 0 < len(ranks) < job.world_size
        summary = (f"{_ticked(names) or 'some parameters'} got no gradient on "
                   f"{ranks_text(ranks)}{when} (counted from 0 by optimizer steps), so DDP's "
                   "reduction of that iteration never finished: DDP waits for a gradient of "
                   "every parameter (find_unused_parameters=False)")
        if some:
            summary += "; the other ranks used them"
        if where:
            summary += f" (raised by the next forward, at {where})"
        fix = CHECKPOINT_FIX if checkpoint else (UNUSED_FIX_SOME if some else UNUSED_FIX_ALL)
        why = ("Without find_unused_parameters=True, DDP's reducer waits for every "
               "parameter's gradient before it all-reduces the bucket that holds it; a "
               "parameter the forward did not use never gets one, the bucket is never "
               "reduced, and the next forward raises.")
    detail = f"{why}\n{base.detail}"
    states = {e.checkpoint for e in errors}
    evidence = {**base.evidence, "parameters": list(names),
                "indices": sorted({i for e in errors for i in e.indices}),
                "ranks": list(ranks), "iteration": iters[0] if len(iters) == 1 else
                (iters or None), "mechanism": first.mechanism,
                "checkpoint": True if checkpoint else
                (None if Checkpointed.UNKNOWN in states else False)}
    if first.module:
        evidence.update(module=first.module, module_parameters=list(first.module_params))
    if first.find_unused is not None:
        evidence["find_unused_parameters"] = first.find_unused
    return Finding(FindingKind.RANK_FAILED, Severity.ERROR, ranks, base.seq, summary, detail, fix,
                   evidence)


# -- the construction check ---------------------------------------------------------------
def construction_failure(run: RankRun) -> bool:
    """Did the rank raise DDP's construction check (same model across ranks)?"""
    msg, _ = _message(run)
    return bool(SAME_MODEL.search(msg) or PARAM_SIZES.search(msg))


def _signature(table: dict[str, Any]) -> tuple:
    return tuple((str(n), tuple(s), bool(g)) for n, s, g in table.get("params") or [])


def _differences(odd: dict[str, Any], ref: dict[str, Any], odd_ranks: list[int],
                 ref_ranks: list[int]) -> list[dict[str, Any]]:
    """What differs between two parameter tables, parameter by parameter."""
    from ddpdoctor.analysis.model import ranks_text

    mine = {str(n): (list(s), bool(g)) for n, s, g in odd.get("params") or []}
    theirs = {str(n): (list(s), bool(g)) for n, s, g in ref.get("params") or []}
    who, others = ranks_text(odd_ranks), ranks_text(ref_ranks)
    out = []
    for name in list(dict.fromkeys([*theirs, *mine])):
        a, b = mine.get(name), theirs.get(name)
        if a == b:
            continue
        if a is None:
            text = f"{who} has no parameter `{name}` ({others}: shape {b[0]})"  # type: ignore
        elif b is None:
            text = f"{who} has an extra parameter `{name}` (shape {a[0]})"
        elif a[0] != b[0]:
            text = f"`{name}` has shape {a[0]} on {who}, {b[0]} on {others}"
        else:
            text = (f"`{name}` has requires_grad={a[1]} on {who}, {b[1]} on {others}"
                    + (" (frozen on " + who + " only)" if not a[1] else ""))
        out.append({"parameter": name, "text": text,
                    "odd": {"shape": a[0], "requires_grad": a[1]} if a else None,
                    "others": {"shape": b[0], "requires_grad": b[1]} if b else None})
    return out


def construction_mismatch(job: JobView, states: dict[int, RankState]) -> Finding | None:
    """DDP's construction check failed: ONE finding naming the odd rank (the minority by
    the parameter tables the ranks recorded) and what differs."""
    from ddpdoctor.analysis.model import ranks_text

    raised = [r for r, run in sorted(job.ranks.items()) if construction_failure(run)]
    if not raised:
        return None
    tables = {r: t for r, run in job.ranks.items() if (t := parameter_table(run))}
    groups: dict[tuple, list[int]] = {}
    for r, t in sorted(tables.items()):
        groups.setdefault(_signature(t), []).append(r)
    probable, tie = False, False
    if len(groups) >= 2:
        ranked = _by_evidence(sorted(groups.values(),
                                     key=lambda rs: (-len(rs), 0 not in rs, rs[0])), tables)
        ref = ranked[0]
        tie = len(ranked[1]) == len(ref) and _frozen(tables[ranked[1][0]]) == \
            _frozen(tables[ref[0]])  # no majority, and neither side froze more
        odd = sorted(r for rs in ranked[1:] for r in rs)
        diffs = []
        for rs in ranked[1:]:
            diffs += _differences(tables[rs[0]], tables[ref[0]], rs, ref)
        if tie:  # name every side: nothing singles one out
            odd, ref = sorted(r for rs in ranked for r in rs), []
    else:
        odd, ref, diffs = _odd_by_message(job, raised), [], []
        probable = True
    if not odd:
        return None
    what = "; ".join(d["text"] for d in diffs[:4]) or "its parameters differ"
    built_at = next((s.death.where for r in odd if (s := states.get(r)) is not None and
                     s.death is not None and s.death.where), "")
    lead = (f"{'probably ' if probable else ''}{ranks_text(odd)} built a different model "
            f"than {'rank ' + str(ref[0]) if len(ref) == 1 else 'the others'}" if not tie else
            f"{ranks_text(odd)} built different models (as many ranks on each side, none "
            "froze more than the other: nothing singles one out)")
    changed = sorted(f"{f}:{n}" for (f, n), kind in job.lint_sites.items()
                     if kind == "rank_dependent_model")
    summary = (f"{lead}, so DDP's construction check failed"
               + (f" at {built_at}" if built_at else "") + f": {what}"
               + (f"; the model is changed under a rank test at {changed[0]}" if changed else ""))
    lines = [f"DDP checks at construction that every rank holds the same parameters (count, "
             f"shapes, requires_grad); {ranks_text(raised)} raised it."]
    lines += [f"  {d['text']}" for d in diffs[:16]]
    if ref and len(ref) == len(odd):
        lines.append(f"As many ranks on each side ({ranks_text(ref)} against {ranks_text(odd)}): "
                     f"{ranks_text(odd)} is named because it froze parameters, not by counting "
                     "(requires_grad=False is a choice; a new parameter requires grad).")
    elif ref:
        lines.append(f"{ranks_text(ref).capitalize()} agree; the odd one out: "
                     f"{ranks_text(odd)}.")
    if changed:
        lines.append("Lint flagged the change before the run (rank_dependent_model) at "
                     + ", ".join(changed[:3]) + ".")
    for r in raised[:4]:
        msg, _ = _message(job.ranks[r])
        lines.append(f"Rank {r}: {msg.splitlines()[0][:300] if msg else '?'}")
    fix = ("Build the same model on every rank before wrapping it in DDP: a parameter frozen, "
           "added or reshaped on some ranks only (a rank-dependent config, a checkpoint "
           "loaded on one rank, a per-rank flag) must be the same everywhere; freeze or "
           "reshape on every rank, or after DDP on none.")
    return Finding(FindingKind.RANK_FAILED, Severity.ERROR, tuple(odd), None, summary,
                   "\n".join(lines), fix,
                   {"construction": True, "odd_ranks": odd, "agree": ref,
                    "differences": diffs[:16], "raised": raised, "probable": probable,
                    "no_majority": tie or len(ref) == len(odd)})


def _frozen(table: dict[str, Any]) -> int:
    """How many parameters the rank froze (requires_grad=False)."""
    return sum(1 for _, _, g in table.get("params") or [] if not g)


def _by_evidence(ranked: list[list[int]], tables: dict[int, dict[str, Any]]) -> list[list[int]]:
    """The groups of ranks by parameter table, the reference first: the largest; between two
    of one size, the one that kept more parameters trainable (freezing is what a rank did;
    requires_grad=True is every parameter's default), never rank 0's by default."""
    if len(ranked) >= 2 and len(ranked[0]) == len(ranked[1]) and \
            _frozen(tables[ranked[1][0]]) < _frozen(tables[ranked[0][0]]):
        return [ranked[1], ranked[0], *ranked[2:]]
    return ranked


def _odd_by_message(job: JobView, raised: list[int]) -> list[int]:
    """Without parameter tables: the minority by the counts each rank's message gives, or
    the rank whose sizes differ from process 0's."""
    counts: dict[int, int] = {}
    for r in raised:
        msg, _ = _message(job.ranks[r])
        m = PARAM_SIZES.search(msg)
        if m:
            return [int(m.group(1))]
        m = SAME_MODEL.search(msg)
        if m:
            counts[int(m.group(1))] = int(m.group(2))
    if len(set(counts.values())) < 2:
        return []
    common = Counter(counts.values()).most_common(1)[0][0]
    return sorted(r for r, n in counts.items() if n != common)
