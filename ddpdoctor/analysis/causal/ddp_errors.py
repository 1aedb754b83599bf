"""DDP's own errors in plain words: the reducer's parameter indices named by module path,
and the construction check's mismatch named by the odd rank and what differs.

torch's messages are read by their stable parts only (the indices line, the count and
size clauses), never as whole texts."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ddpdoctor.analysis.causal.state import RankState
from ddpdoctor.analysis.model import Finding, JobView, RankRun, Severity

UNFINISHED = re.compile(r"^Expected to have finished reduction in the prior iteration")
INDICES = re.compile(r"^Parameter indices which did not receive grad for rank (\d+): "
                     r"([\d ]+)$", re.M)
NAMES = re.compile(r"^Parameters which did not receive grad for rank (\d+): (.+)$", re.M)
READY_TWICE = re.compile(r"Parameter at index (\d+)(?: with name (\S+))? has been marked as "
                         r"ready twice")
SAME_MODEL = re.compile(r"^DDP expects same model across all ranks, but Rank (\d+) has "
                        r"(\d+) params")
PARAM_SIZES = re.compile(r"^\[(\d+)\]: params\[(\d+)\] in this process with (sizes|strides) "
                         r"(\[[\d, ]*\]) appears not to match")
CHECKPOINT_FILE = "torch/utils/checkpoint.py"

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
    "use_reentrant=False), which DDP supports; or pass static_graph=True to DDP if the "
    "model's graph is the same every iteration.")
READY_TWICE_FIX = (
    "A parameter took part in two backward passes of one iteration (shared, or used again "
    "after a first backward): pass static_graph=True to DDP if the graph is the same every "
    "iteration, or run the first backward under ddp.no_sync().")


@dataclass(frozen=True)
class ReducerError:
    """A reducer error of one rank: which parameters, named by module path where known."""

    rank: int
    mechanism: str  # "no_grad" (prior reduction unfinished) | "ready_twice"
    indices: tuple[int, ...]
    names: tuple[str, ...]
    iteration: int | None  # 0-based, by optimizer steps: the iteration that left them
    checkpoint: bool  # torch.utils.checkpoint in the traceback


def _message(run: RankRun) -> tuple[str, list[dict[str, Any]]]:
    exc = run.exception() or {}
    frames = [f for f in exc.get("traceback") or [] if isinstance(f, dict)]
    return str(exc.get("message") or ""), frames


def parameter_table(run: RankRun) -> dict[str, Any] | None:
    """The rank's newest DDP parameter table (ddp/swap.py records one per DDP built)."""
    found = run.trace.meta_events("ddp_params")
    return found[-1] if found else None


def _named(run: RankRun, indices: tuple[int, ...]) -> tuple[str, ...]:
    table = parameter_table(run)
    order = (table or {}).get("reducer") or []
    return tuple(str(order[i]) if 0 <= i < len(order) else f"parameter #{i}" for i in indices)


def reducer_error(run: RankRun) -> ReducerError | None:
    """The reducer error this rank raised, if its exception is one."""
    msg, frames = _message(run)
    checkpoint = any(CHECKPOINT_FILE in str(f.get("filename", "")) for f in frames) or \
        any(CHECKPOINT_FILE in str(f.get("filename", "")) for f in run.stack or [])
    steps = max(int(run.header.step), 0)
    if UNFINISHED.search(msg):
        m = INDICES.search(msg)
        indices = tuple(int(i) for i in m.group(2).split()) if m else ()
        named = NAMES.search(msg)
        names = tuple(n.strip() for n in named.group(2).split(",")) if named else \
            _named(run, indices)
        return ReducerError(run.rank, "no_grad", indices, names,
                            steps - 1 if steps else None, checkpoint)
    m = READY_TWICE.search(msg)
    if m:
        index = int(m.group(1))
        names = (m.group(2),) if m.group(2) else _named(run, (index,))
        return ReducerError(run.rank, "ready_twice", (index,), names, steps, checkpoint)
    return None


def _ticked(names: tuple[str, ...]) -> str:
    shown = ", ".join(f"`{n}`" for n in names[:8])
    return shown + (f" and {len(names) - 8} more" if len(names) > 8 else "")


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
    if first.mechanism == "ready_twice":
        summary = (f"DDP's reducer on {ranks_text(ranks)}: parameter {_ticked(names)} was "
                   f"marked ready twice{when}: it got a gradient from two backward passes")
        fix = CHECKPOINT_FIX if any(e.checkpoint for e in errors) else READY_TWICE_FIX
        why = ("DDP reduces each parameter's gradient once per iteration; a second "
               "gradient for the same parameter in that iteration (reentrant activation "
               "checkpointing, a shared parameter, or two backward calls) breaks its count.")
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
        fix = CHECKPOINT_FIX if any(e.checkpoint for e in errors) else \
            (UNUSED_FIX_SOME if some else UNUSED_FIX_ALL)
        why = ("Without find_unused_parameters=True, DDP's reducer waits for every "
               "parameter's gradient before it all-reduces the bucket that holds it; a "
               "parameter the forward did not use never gets one, the bucket is never "
               "reduced, and the next forward raises.")
    detail = f"{why}\n{base.detail}"
    evidence = {**base.evidence, "parameters": list(names),
                "indices": sorted({i for e in errors for i in e.indices}),
                "ranks": list(ranks), "iteration": iters[0] if len(iters) == 1 else
                (iters or None), "mechanism": first.mechanism,
                "checkpoint": any(e.checkpoint for e in errors)}
    return Finding("rank_failed", Severity.ERROR, ranks, base.seq, summary, detail, fix,
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
    probable = False
    if len(groups) >= 2:
        ranked = sorted(groups.values(), key=lambda rs: (-len(rs), 0 not in rs, rs[0]))
        ref = ranked[0]
        probable = len(ranked[1]) == len(ref)  # a tie: torch compares with process 0
        odd = sorted(r for rs in ranked[1:] for r in rs)
        diffs = []
        for rs in ranked[1:]:
            diffs += _differences(tables[rs[0]], tables[ref[0]], rs, ref)
    else:
        odd, ref, diffs = _odd_by_message(job, raised), [], []
        probable = True
    if not odd:
        return None
    what = "; ".join(d["text"] for d in diffs[:4]) or "its parameters differ"
    built_at = next((s.death.where for r in odd if (s := states.get(r)) is not None and
                     s.death is not None and s.death.where), "")
    summary = (f"{'probably ' if probable else ''}{ranks_text(odd)} built a different model "
               f"than the others, so DDP's construction check failed"
               + (f" at {built_at}" if built_at else "") + f": {what}")
    lines = [f"DDP checks at construction that every rank holds the same parameters (count, "
             f"shapes, requires_grad); {ranks_text(raised)} raised it."]
    lines += [f"  {d['text']}" for d in diffs[:16]]
    if ref:
        lines.append(f"{ranks_text(ref).capitalize()} agree; the odd one out: "
                     f"{ranks_text(odd)}.")
    for r in raised[:4]:
        msg, _ = _message(job.ranks[r])
        lines.append(f"Rank {r}: {msg.splitlines()[0][:300] if msg else '?'}")
    fix = ("Build the same model on every rank before wrapping it in DDP: a parameter frozen, "
           "added or reshaped on some ranks only (a rank-dependent config, a checkpoint "
           "loaded on one rank, a per-rank flag) must be the same everywhere; freeze or "
           "reshape on every rank, or after DDP on none.")
    return Finding("rank_failed", Severity.ERROR, tuple(odd), None, summary,
                   "\n".join(lines), fix,
                   {"construction": True, "odd_ranks": odd, "agree": ref,
                    "differences": diffs[:16], "raised": raised, "probable": probable})


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
