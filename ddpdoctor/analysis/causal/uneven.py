"""uneven_batches: ranks ran, or will run, different numbers of batches in an epoch.

Predicted at the start of an epoch from the ranks' ``loader_epoch`` events (the loader's
length where ``len()`` is defined), before anything hangs; confirmed after the fact from
the batch counts (``loader_end`` events, else BATCH records) when a rank left the loop
after k batches while another ran batch k+1.

Loaders are told apart by the loader object (its construction and the line that
iterates it, see ``runtime.loader_facts.loader_id``), so a loader only some ranks iterate (rank 0's
evaluation) is never compared with another.  A hang is blamed on uneven batches only
when they are confirmed on the same loader; a prediction alone is a warning.

Culprits (``ranks``): the ranks that ran (or will run) FEWER batches.  They are the ones
whose collectives are missing when the job hangs (the others wait in batch k+1's
gradient all-reduce), so this finding supersedes a missing_collective naming them; and
the fix is on their side of the split (pad it, drop_last, or let them Join).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ddpdoctor.analysis.align.clocks import host_now
from ddpdoctor.analysis.align.epochs import (EpochFacts, EpochKey, job_epochs,
                                                        loader_name, rank_list)
from ddpdoctor.analysis.model import FindingKind, NS, Finding, JobView, Severity, ranks_values
from ddpdoctor.rundir.bounded import open_regular

FIX = ("Give every rank the same number of batches: use DistributedSampler (it pads the "
       "ranks to equal length) or drop_last=True; shard an IterableDataset into equal "
       "parts (or stop every rank at the shortest shard, e.g. all_reduce a 'done' flag with "
       "MIN each step); or wrap the loop in `torch.distributed.algorithms.Join([model])` "
       "so a rank that runs out of data shadows the others' collectives.")

# -- prediction (cheap, live) ----------------------------------------------------------
def predict(starts: dict[int, dict[EpochKey, dict[str, Any]]],
            world_size: int | None = None) -> Finding | None:
    """The first loader epoch whose predicted lengths differ across ranks (every rank of
    the world must have started it), as a warning, or None."""
    if len(starts) < 2 or (world_size and len(starts) < world_size):
        return None
    common = set.intersection(*(set(s) for s in starts.values()))
    for key in sorted(common):
        lengths = {r: s[key].get("length") for r, s in starts.items()}
        if not all(isinstance(n, int) for n in lengths.values()):
            continue
        if len(set(lengths.values())) > 1:
            at = max(int(s[key].get("t") or 0) for s in starts.values())
            return _predicted_finding(key, lengths, at, {r: s[key] for r, s in starts.items()})
    return None


def _predicted_finding(key: EpochKey, lengths: dict[int, int], at_ns: int,
                       starts: dict[int, dict[str, Any]]) -> Finding:
    most = max(lengths.values())
    fewer = tuple(sorted(r for r, n in lengths.items() if n < most))
    loader, epoch = key
    per = ranks_values(lengths)
    name = loader_name(next(iter(starts.values()), None), loader)
    summary = (f"{rank_list(fewer)} will run fewer batches than the others in epoch "
               f"{epoch} of {name} ({per}): the job will hang at the end of the epoch")
    detail = (f"At the start of epoch {epoch}, len(loader) differs across ranks ({per}). "
              f"When {rank_list(fewer)} leave{'s' if len(fewer) == 1 else ''} the loop, the "
              "others enter the next batch's gradient all-reduce alone and wait forever."
              + _split_note(starts))
    evidence = {"loader": loader, "site": next(iter(starts.values()), {}).get("site"),
                "epoch": epoch, "predicted": {str(r): n for r, n in sorted(lengths.items())},
                "predicted_at_ns": at_ns, "ran": None}
    return Finding(FindingKind.UNEVEN_BATCHES, Severity.WARNING, fewer, None, summary, detail, FIX,
                   evidence)


def _split_note(starts: dict[int, dict[str, Any]]) -> str:
    first = next(iter(starts.values()), {})
    sampler, dataset = first.get("sampler"), first.get("dataset")
    samples = {r: s.get("samples") for r, s in starts.items()}
    text = f"\nDataset {dataset}, sampler {sampler}"
    if all(isinstance(n, int) for n in samples.values()):
        text += f" (samples per rank: {ranks_values(samples)})"
    if first.get("drop_last") is False and first.get("batch_size"):
        text += f"; drop_last=False with batch_size {first['batch_size']}"
    return text + "."


class MetaTail:
    """Follows one meta log, reading only what was appended since the last call."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self.rank: int | None = None
        self.world: int | None = None
        self.starts: dict[EpochKey, dict[str, Any]] = {}
        self._partial = b""

    def poll(self) -> None:
        import json

        try:
            fd = open_regular(self.path)  # BadInput for a FIFO: never a hang
        except OSError:
            return
        try:
            data = os.pread(fd, 1 << 20, self.offset)
        except OSError:
            return
        finally:
            os.close(fd)
        self.offset += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            if b'"init"' not in line and b'"loader_epoch"' not in line:
                continue
            try:
                m = json.loads(line)
            except ValueError:
                continue
            if m.get("event") == "init" and isinstance(m.get("rank"), int):
                self.rank, self.world = m["rank"], m.get("world_size")
            elif m.get("event") == "loader_epoch" and isinstance(m.get("loader"), int):
                self.starts[(m["loader"], int(m.get("epoch", 0)))] = m


_tails: dict[Path, MetaTail] = {}


def predict_uneven(run_dir: Path) -> Finding | None:
    """The predicted uneven_batches finding of a live run dir, or None.  Cheap enough to
    call every second: it reads only what the ranks' meta logs gained since the last
    call (no ring, no stacks)."""
    trace_dir = Path(run_dir) / "traces"
    try:
        paths = [trace_dir / n for n in os.listdir(trace_dir) if n.endswith(".meta.jsonl")]
    except OSError:
        return None
    starts: dict[int, dict[EpochKey, dict[str, Any]]] = {}
    world = None
    for path in paths:
        tail = _tails.get(path)
        if tail is None:
            tail = _tails[path] = MetaTail(path)
        tail.poll()
        if tail.rank is not None and tail.rank >= 0:
            starts[tail.rank] = tail.starts
            world = tail.world or world
    return predict(starts, world)


# -- the detector --------------------------------------------------------------------------
def _waiting(job: JobView) -> dict[int, Any]:
    """Ranks inside a collective that never returned (the job hangs or was stopped)."""
    open_calls = {r: c for r, run in job.ranks.items() if (c := run.open_call()) is not None}
    if job.live and job.outcome is None:  # still running: only calls past the timeout
        limit = job.hang_timeout * NS
        return {r: c for r, c in open_calls.items() if host_now(job, r) - c.t_start >= limit}
    return open_calls


def detect(job: JobView) -> list[Finding]:
    findings = []
    by_key = job_epochs(job)
    loaders = sorted({k[0] for k in by_key})
    waiting = _waiting(job)
    for loader in loaders:
        keys = sorted(k for k in by_key if k[0] == loader)
        f = _loader_finding(job, loader, keys, by_key, waiting)
        if f is not None:
            findings.append(f)
    return findings


def _loader_finding(job: JobView, loader: int, keys: list[EpochKey],
                    by_key: dict[EpochKey, dict[int, EpochFacts]],
                    waiting: dict[int, Any]) -> Finding | None:
    members = sorted(job.ranks)
    if len(members) < 2:
        return None
    history: dict[str, dict[str, Any]] = {}
    first: tuple[EpochKey, dict[int, int], bool] | None = None
    for key in keys:
        per = by_key[key]
        ran = {r: f.ran for r, f in per.items()}
        ended = {r: f.ended for r, f in per.items()}
        history[str(key[1])] = {"ran": {str(r): n for r, n in ran.items()},
                                "ended": {str(r): e for r, e in ended.items()},
                                "predicted": {str(r): f.predicted for r, f in per.items()}}
        if first is not None:
            continue
        # confirmed: a rank ended the epoch with fewer batches than another one drew
        done = {r: n for r, n in ran.items() if ended[r]}
        if done and max(ran.values()) > min(done.values()) and len(per) == len(members):
            first = (key, ran, True)
            continue
        predicted = {r: f.predicted for r, f in per.items()}
        if len(per) == len(members) and all(isinstance(n, int) for n in predicted.values()) \
                and len(set(predicted.values())) > 1:
            first = (key, predicted, False)  # type: ignore[assignment]
    if first is None:
        return None
    key, counts, confirmed = first
    return _finding(job, key, counts, confirmed, by_key[key], history, waiting)


def _calls_inside(job: JobView, per: dict[int, EpochFacts], ranks: tuple[int, ...]) -> bool:
    """An uneven epoch can explain a hang only if its batches issue collectives: some rank
    of ``ranks`` (those that ran the most) entered a collective or p2p call between its
    epoch's start and end (a validation loop that only runs forward on one device does not,
    and what the ranks call after it is not a consequence of its length)."""
    for r in ranks:
        facts, run = per.get(r), job.ranks.get(r)
        if facts is None or run is None or not facts.start:
            return True  # not known: as before
        begin = facts.start.get("t")
        end = (facts.end or {}).get("t")
        if type(begin) is not int:
            return True
        last = end if type(end) is int else None
        calls = [c for group in run.calls.values() for c in group] + list(run.p2p)
        if any(c.t_start >= begin and (last is None or c.t_start <= last) for c in calls):
            return True
    return False


def _finding(job: JobView, key: EpochKey, counts: dict[int, int], confirmed: bool,
             per: dict[int, EpochFacts], history: dict[str, Any],
             waiting: dict[int, Any]) -> Finding:
    loader, epoch = key
    most = max(counts.values())
    fewer = tuple(sorted(r for r, n in counts.items() if n < most))
    more = tuple(sorted(r for r, n in counts.items() if n == most))
    hung = (bool(waiting) or job.outcome in ("hung", "failed")) and \
        _calls_inside(job, per, more)
    predicted = {r: f.predicted for r, f in per.items()}
    per_text = ranks_values(counts)
    starts = {r: f.start for r, f in per.items() if f.start}
    at_ns = max((int(s.get("t") or 0) for s in starts.values()), default=0) or None
    name = loader_name(next(iter(starts.values()), None), loader)
    if confirmed:
        summary = (f"{rank_list(fewer)} ran {min(counts.values())} batch"
                   f"{'es' if min(counts.values()) != 1 else ''} in epoch {epoch} of "
                   f"{name} where {rank_list(more)} ran {most} ({per_text})")
    else:
        summary = (f"{rank_list(fewer)} will run fewer batches in epoch {epoch} of "
                   f"{name} than {rank_list(more)} ({per_text} predicted)")
    lines = []
    if any(isinstance(n, int) for n in predicted.values()):
        lines.append(f"Predicted at the start of the epoch (len(loader)): "
                     f"{ranks_values(predicted)}.")
    if hung and confirmed and waiting:
        stuck = [r for r in more if r in waiting]
        if stuck:
            c = waiting[stuck[0]]
            lines.append(f"{rank_list(stuck)} then waited in {c.describe()} at "
                         f"{c.short_site} (seq {c.seq}), batch {most} of the epoch's "
                         f"collectives, which {rank_list(fewer)} never entered: "
                         f"{'it' if len(fewer) == 1 else 'they'} had left the loop.")
    elif not hung:
        lines.append("The job did not hang (no collective per batch, or Join), but the "
                     "ranks trained on different numbers of batches.")
    lines.append(_split_note(starts).strip())
    if hung and confirmed:
        severity = Severity.ERROR
    else:  # a prediction alone never explains a hang: the ranks have not left the loop
        severity = Severity.INFO if job.outcome == "completed" else Severity.WARNING
    evidence = {"loader": loader, "site": next(iter(starts.values()), {}).get("site"),
                "epoch": epoch, "confirmed": confirmed,
                "batches": {str(r): n for r, n in sorted(counts.items())},
                "predicted": {str(r): n for r, n in sorted(predicted.items())},
                "predicted_at_ns": at_ns, "epochs": history}
    seq = None
    stuck = [waiting[r] for r in more if r in waiting]
    if hung and confirmed and stuck:
        first = min(stuck, key=lambda c: c.seq)
        seq = first.seq
        evidence["group"] = first.group
    return Finding(FindingKind.UNEVEN_BATCHES, severity, fewer, seq, summary, "\n".join(lines), FIX,
                   evidence)

