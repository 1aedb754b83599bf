"""The repro script of a ReplayJob: header, groups, one body whose `if rank` branches show
where ranks differ, each rank's folded steps and its ending."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any, Hashable

from ddpdoctor.repro.calls import call_text, comment_text
from ddpdoctor.repro.facts import Ending, RankPlan, ReplayJob
from ddpdoctor.repro.steps import Step
from ddpdoctor.repro.fold import Loop, fold, item_key
from ddpdoctor.repro.loaders import BATCH, END, START

INDENT = "    "
# Where ranks part ways, the branch tests `who`: ddpdoctor reads an `if rank ...` around a
# call as the job's own condition, and the job's are kept in the site functions.
WHO = "who = rank  # the branches below test `who`: an `if rank` is the job's own (see above)"
LOADER_WORDS = {START: "an epoch of {n} batches begins", BATCH: "the next batch",
                END: "the loader runs out: the epoch ends"}
WIDTH = 100


@dataclass(frozen=True)
class End:
    """A rank's last item: how it ends (see ``Ending``)."""

    ending: Ending
    message: str = ""
    busy: bool = False
    destroys: bool = False

    def key(self) -> Hashable:
        return ("end", self.ending, self.message, self.busy, self.destroys)


def program(plan: RankPlan) -> list[Any]:
    """A rank's steps followed by its End (whose message counts where the replay raises it)."""
    message = plan.message if plan.ending == Ending.RAISES else ""
    return list(plan.steps) + [End(plan.ending, message, plan.busy, plan.destroys)]


class ScriptWriter:
    """Writes the body of ``main``: the ranks' programs as one block of code."""

    def __init__(self, job: ReplayJob) -> None:
        self.job = job
        self.group_vars = {name: _group_var(name, i) for i, (name, _) in enumerate(job.groups)}
        self.sizes = {name: len(ranks) for name, ranks in job.groups}
        self.lines: list[str] = []
        self.uses_who = False  # a branch tests `who`, not `rank` (see WHO)
        self.site_names: dict[str, str] = {}  # the job's call site -> its helper's name
        self.helpers: list[str] = []

    def site_helper(self, step: Step) -> str:
        """The name of the one function through which every call the job made at this
        site is made (so that the replay's calls, like the job's, share a line per site)."""
        name = self.site_names.get(step.site)
        if name is None:
            stem, _, line = step.site.rpartition(":")
            name = f"at_{line}"
            if name in self.site_names.values():
                name = f"at_{re.sub(r'[^0-9A-Za-z]', '_', stem.rsplit('.', 1)[0])}_{line}"
            while name in self.site_names.values():
                name += "_"
            self.site_names[step.site] = name
            doc = _docstring_safe(f"{step.site}  {step.source}".rstrip())
            self.helpers += ["", "", f"def {name}(call, *args, **kwargs):",
                             f'{INDENT}"""The job\'s calls at {doc}"""']
            if step.ranked:
                self.helpers += [f"{INDENT}if RANK_DEPENDENT:  # the job made this call under "
                                 "an `if` on the rank", f"{INDENT * 2}return call(*args, **kwargs)"]
            else:
                self.helpers.append(f"{INDENT}return call(*args, **kwargs)")
        return name

    def emit(self, depth: int, text: str) -> None:
        self.lines.append(INDENT * depth + text)

    def step(self, depth: int, step: Step) -> None:
        code = call_text(step, self.group_vars.get(step.group),
                         self.sizes.get(step.group, self.job.world_size))
        if step.op in LOADER_WORDS:
            site = dict(self.job.loaders).get(step.group, "?")
            words = LOADER_WORDS[step.op].format(n=step.in_shapes[0][0] if step.in_shapes else 0)
            comment = f"# {site}  [{words}]"
        else:
            comment = comment_text(step)
            if re.fullmatch(r"[^:\s]+:\d+", step.site) and not step.wait:
                lhs, eq, call = code.rpartition(" = ")
                fn, _, args = call.partition("(")
                code = f"{lhs}{eq}{self.site_helper(step)}({fn}, {args}".replace(", )", ")")
        self.emit(depth, f"{code}  {comment}"[:WIDTH + 60].rstrip())

    def end(self, depth: int, end: End) -> None:
        if end.ending == Ending.RAISES:
            self.emit(depth, f"raise RuntimeError({end.message!r})  # the rank crashed here")
        elif end.ending == Ending.STALLS:
            how = "computing" if end.busy else "blocked in its own code"
            self.emit(depth, f"stall(busy={end.busy})  # the rank was {how} here, outside "
                             "any collective, when the job ended")
        elif end.ending == Ending.CALL_FAILS:
            self.emit(depth, "pass  # in the job, the call above raised on this rank")
        elif end.ending == Ending.HANGS:
            self.emit(depth, "pass  # the rank was still in the call above when the job ended")
        elif end.ending == Ending.NEVER_INIT:
            self.emit(depth, "pass  # (stalled before init_process_group, above)")
        elif end.destroys:
            self.emit(depth, "dist.destroy_process_group()")
        else:
            self.emit(depth, "pass  # the rank returned here")

    def item(self, depth: int, item: Any) -> None:
        if isinstance(item, Loop):
            name = "step" if depth == 1 else "_"
            self.emit(depth, f"for {name} in range({item.count}):")
            for inner in item.body:
                self.item(depth + 1, inner)
        elif isinstance(item, End):
            self.end(depth, item)
        else:
            self.step(depth, item)

    def block(self, depth: int, progs: dict[int, list[Any]]) -> None:
        """These ranks' steps: the steps they share, folded, once; where they differ, one
        ``if rank ...`` branch per set of ranks that go on alike, each with its own rest."""
        keys = {r: [item_key(x) for x in p] for r, p in progs.items()}
        shortest = min(len(k) for k in keys.values())
        first = next(iter(keys.values()))
        same = 0
        while same < shortest and all(k[same] == first[same] for k in keys.values()):
            same += 1
        for item in fold(next(iter(progs.values()))[:same]):
            self.item(depth, item)
        rest = {r: p[same:] for r, p in progs.items() if len(p) > same}
        if rest:
            self.branches(depth, rest, {r: item_key(p[0]) for r, p in rest.items()},
                          len(rest) < len(progs))

    def branches(self, depth: int, rest: dict[int, list[Any]], keys: dict[int, Hashable],
                 some_ended: bool) -> None:
        parts: dict[Hashable, list[int]] = {}
        for r in sorted(rest):
            parts.setdefault(keys[r], []).append(r)
        sets = list(parts.values())
        if len(sets) == 1 and not some_ended:
            self.block(depth, rest)
            return
        var = "who"
        self.uses_who = True
        for n, ranks in enumerate(sets):
            if n == len(sets) - 1 and n > 0 and not some_ended:
                self.emit(depth, f"else:  # rank{'s' if len(ranks) > 1 else ''} "
                                 f"{', '.join(map(str, ranks))}")
            else:
                word = "if" if n == 0 else "elif"
                cond = (f"{var} == {ranks[0]}" if len(ranks) == 1 else
                        f"{var} in ({', '.join(map(str, ranks))})")
                self.emit(depth, f"{word} {cond}:")
            self.block(depth + 1, {r: rest[r] for r in ranks})


def _docstring_safe(text: str) -> str:
    return text.replace("\\", "/").replace(chr(34) * 3, chr(39) * 3)


def _group_var(name: str, index: int) -> str:
    return f"g{name}" if re.fullmatch(r"\d+", name) else f"g_{index + 1}"


PRELUDE = '''import os
import time

import torch
import torch.distributed as dist

R = dist.ReduceOp


def z(*shape, dtype=torch.float32):
    """A zero-filled tensor: the replay needs the recorded shapes and dtypes, not the data."""
    return torch.zeros(shape, dtype=dtype)


def zs(n, *shape, dtype=torch.float32):
    return [z(*shape, dtype=dtype) for _ in range(n)]


RANK_DEPENDENT = True  # the job made the call under an `if` on the rank


def stall(busy):
    """Stay here as the recorded rank did, outside any collective, until stopped."""
    while True:
        if busy:
            sum(range(100_000))
        else:
            time.sleep(0.5)
'''


def _header(job: ReplayJob) -> list[str]:
    cmd = " ".join(shlex.quote(c) for c in job.command) or "unknown"
    n = job.world_size
    lines = [
        "#!/usr/bin/env python",
        f'"""ddpdoctor repro: the collectives of a recorded job, replayed with zero tensors.',
        "",
        f"Job:    {cmd}",
        f"        {n} ranks, started {job.started_at}, {job.outcome}; recorded by {job.source}",
        f"        (run dir {job.run_dir})",
    ]
    if job.finding:
        lines.append("Found:  " + _wrap(job.finding, "        "))
    lines += [f"Replay: ddpdoctor run --nproc-per-node {n} THIS_FILE  "
              f"(or torchrun --nproc-per-node {n} THIS_FILE)",
              "Needs torch only: no model, no data, no import of the job's code. Each call",
              "says where the job made it (file:line and its source line)."]
    for note in job.notes:
        lines.append("Not replayed: " + _wrap(note, "        "))
    lines.append('"""')
    return lines


def _wrap(text: str, indent: str) -> str:
    words, out, line = text.replace('"""', "'''").split(), [], ""
    for w in words:
        if line and len(line) + len(w) + 1 > WIDTH - len(indent):
            out.append(line)
            line = w
        else:
            line = f"{line} {w}" if line else w
    out.append(line)
    return f"\n{indent}".join(out)


def script_text(job: ReplayJob) -> str:
    """The whole repro script of ``job``."""
    writer = ScriptWriter(job)
    progs = {plan.rank: program(plan) for plan in job.plans}
    writer.block(1, progs)
    never = [p.rank for p in job.plans if p.ending == Ending.NEVER_INIT]
    prelude = PRELUDE.rstrip("\n")
    if job.loaders:
        prelude = prelude.replace("import torch.distributed as dist\n",
                                  "import torch.distributed as dist\n"
                                  "from torch.utils.data import DataLoader\n")
    out = _header(job) + [prelude]
    for name, site in job.loaders:
        out += ["", "", f"def {name}(n, rank):",
                f'{INDENT}"""{_docstring_safe(site)}  (replayed: n batches of other numbers '
                f'on each rank)."""',
                f"{INDENT}return iter(DataLoader(range(rank * n, rank * n + n)))"]
    out += writer.helpers
    out += ["", "", "def main():", f'{INDENT}rank = int(os.environ["RANK"])',
            f'{INDENT}assert int(os.environ["WORLD_SIZE"]) == {job.world_size}, '
            f'"run it with {job.world_size} ranks"']
    for r in never:
        busy = next(p.busy for p in job.plans if p.rank == r)
        out.append(f"{INDENT}if rank == {r}:  # rank {r} never got through init_process_group")
        out.append(f"{INDENT * 2}stall(busy={busy})")
    if writer.uses_who:
        out.append(f"{INDENT}{WHO}")
    out.append(f'{INDENT}dist.init_process_group("gloo")')
    for name, ranks in job.groups:
        out.append(f"{INDENT}{writer.group_vars[name]} = dist.new_group({list(ranks)})")
    out += writer.lines
    out += ["", "", 'if __name__ == "__main__":', f"{INDENT}main()", ""]
    return "\n".join(out)
