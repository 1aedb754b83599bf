"""The repro script of a ReplayJob: header, groups, one body whose `if rank` branches show
where ranks differ, each rank's folded steps and its ending."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Hashable

from ddpdoctor.repro.calls import call_text, comment_text
from ddpdoctor.repro.ddp_replay import DDP_BUILD, PARAMS_CLASS
from ddpdoctor.repro.facts import OPTIMIZER_STEP, Ending, RankPlan, ReplayJob
from ddpdoctor.repro.header import WIDTH, header_lines
from ddpdoctor.repro import safe_text
from ddpdoctor.repro.safe_text import literal
from ddpdoctor.repro.steps import Step
from ddpdoctor.repro.fold import Loop, fold, item_key
from ddpdoctor.repro.loaders import BATCH, END, START

INDENT = "    "
# Where ranks part ways, the branch tests `who`: ddpdoctor reads an `if rank ...` around a
# call as the job's own condition, and the job's are kept in the site functions.
WHO = "who = rank  # the branches below test `who`: an `if rank` is the job's own (see above)"
LOADER_WORDS = {START: "an epoch of {n} batches begins", BATCH: "the next batch",
                END: "the loader runs out: the epoch ends"}


@dataclass(frozen=True)
class End:
    """A rank's last item: how it ends (see ``Ending``)."""

    ending: Ending
    message: str = ""
    busy: bool = False
    destroys: bool = False
    built_ddp: bool = False  # the rank built a DDP (``ddp``), whose reducer holds its group

    def key(self) -> Hashable:
        return ("end", self.ending, self.message, self.busy, self.destroys, self.built_ddp)


# A stand-in for the job's optimizer: its step() runs torch's step hooks (which mark the
# iteration) and updates nothing.  torch's own optimizers import torch._dynamo as they are
# built (about 2 s of CPU in every rank of a replay that otherwise needs a second).
STEPS_CLASS = '''class ReplayedSteps(torch.optim.Optimizer):
    """An optimizer with nothing to update: step() only runs torch's step hooks."""

    def __init__(self):  # no Optimizer.__init__: it would import torch._dynamo
        self.defaults, self.state, self.param_groups = {}, {}, []
        self._optimizer_step_pre_hooks, self._optimizer_step_post_hooks = {}, {}
        self._patch_step_function()

    def step(self, closure=None):
        return None


OPTIMIZER = ReplayedSteps()'''


def program(plan: RankPlan) -> list[Any]:
    """A rank's steps followed by its End (whose message counts where the replay raises it)."""
    message = plan.message if plan.ending == Ending.RAISES else ""
    built = any(st.op == DDP_BUILD for st in plan.steps)
    return list(plan.steps) + [End(plan.ending, message, plan.busy, plan.destroys, built)]


class ScriptWriter:
    """Writes the body of ``main``: the ranks' programs as one block of code."""

    def __init__(self, job: ReplayJob) -> None:
        self.job = job
        self.group_vars = {name: _group_var(name, i) for i, (name, _) in enumerate(job.groups)}
        self.sizes = {name: len(ranks) for name, ranks in job.groups}
        self.members = {name: set(ranks) for name, ranks in job.groups}
        self.group_tables: dict[str, str] = {}  # rank -> its own group: variable name
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
            doc = literal(f"The job's calls at {step.site}  {step.source}".rstrip())
            self.helpers += ["", "", f"def {name}(call, *args, **kwargs):", f"{INDENT}{doc}"]
            if step.ranked:
                self.helpers += [f"{INDENT}if RANK_DEPENDENT:  # the job made this call under "
                                 "an `if` on the rank", f"{INDENT * 2}return call(*args, **kwargs)"]
            else:
                self.helpers.append(f"{INDENT}return call(*args, **kwargs)")
        return name

    def emit(self, depth: int, text: str) -> None:
        self.lines.append(INDENT * depth + text)

    def step(self, depth: int, step: Step, peer: str = "", group: str = "") -> None:
        """One call; ``peer`` / ``group``: expressions that stand for the recorded ones
        where ranks share the line with their own peers or groups."""
        code = call_text(step, group or self.group_vars.get(step.group),
                         self.sizes.get(step.group, self.job.world_size), peer)
        if step.op == OPTIMIZER_STEP:
            comment = "# the job's optimizer step (counted by ddpdoctor: the steps are replayed)"
        elif step.op in LOADER_WORDS:
            site = dict(self.job.loaders).get(step.group, "?")
            words = LOADER_WORDS[step.op].format(n=step.in_shapes[0][0] if step.in_shapes else 0)
            comment = safe_text.comment(f"# {site}  [{words}]")
        else:
            comment = comment_text(step)
            if re.fullmatch(r"[^:\s]+:\d+", step.site) and not step.wait:
                lhs, eq, call = code.rpartition(" = ")
                fn, _, args = call.partition("(")
                code = f"{lhs}{eq}{self.site_helper(step)}({fn}, {args}".replace(", )", ")")
        if len(INDENT * depth + code) <= WIDTH + 60:
            self.emit(depth, f"{code}  {comment}"[:WIDTH + 60].rstrip())
            return
        self.emit(depth, comment[:WIDTH + 60])  # a long call: its comment above it, and
        parts, line = [], ""  # the call broken after commas, between its arguments
        for arg in _arguments(code):
            if line and len(line) + len(arg) + 3 > WIDTH - len(INDENT) * (depth + bool(parts)):
                parts.append(line + ",")
                line = arg
            else:
                line = f"{line}, {arg}" if line else arg
        for i, text in enumerate(parts + [line]):
            self.emit(depth + bool(i), text)

    def column(self, depth: int, ranks: list[int], col: tuple[Any, ...]) -> None:
        """The same item of several ranks: once; their own peers and groups as expressions
        of ``rank`` where those differ."""
        first = col[0]
        if not isinstance(first, Step) or len({item_key(x) for x in col}) == 1:
            self.item(depth, first)
            return
        peer = group = ""
        if len({x.peer for x in col}) > 1:
            peer = self.rank_expr(ranks, [x.peer for x in col], relative=True)
        if len({x.group for x in col}) > 1:
            table = self.rank_expr(ranks, [self.group_vars.get(x.group, "None") for x in col])
            group = table  # a table of every rank is named once, before the calls
            for full, name in self.group_tables.items():
                if all(f"{r}: {self.group_vars.get(x.group)}," in full[1:-7] + ","
                       for r, x in zip(ranks, col)):
                    group = name
            if group == table and len(ranks) == self.job.world_size:
                group = self.group_tables.setdefault(table,
                                                     f"own_group{len(self.group_tables) + 1}")
        self.step(depth, first, peer, group)

    def rank_expr(self, ranks: list[int], values: list[Any], relative: bool = False) -> str:
        """``(rank + 1) % 8`` when each value is the rank shifted alike, else a table."""
        world = self.job.world_size
        shifts = {(v - r) % world for r, v in zip(ranks, values)} if relative else set()
        if len(shifts) == 1:
            k = shifts.pop()
            return f"(rank - 1) % {world}" if k == world - 1 else f"(rank + {k}) % {world}"
        return "{" + ", ".join(f"{r}: {v}" for r, v in zip(ranks, values)) + "}[rank]"

    def rel_key(self, item: Any, rank: int) -> Hashable:
        """What must be alike for ranks to share a line: a step's key with its p2p peer as
        an offset from the rank and its group as "a group of n ranks that holds it"."""
        if not isinstance(item, Step):
            return item_key(item)
        key = list(item.key())
        if item.p2p and item.peer >= 0:
            key[6] = ("shift", (item.peer - rank) % self.job.world_size)
        members = self.members.get(item.group)
        if members is not None and rank in members:
            key[1] = ("own group", len(members))
        return tuple(key)

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
            self.emit(depth, "pass  # the rank was still in the call above (or in init) when "
                             "the job ended")
        elif end.ending == Ending.NEVER_INIT:
            self.emit(depth, "pass  # (stalled before init_process_group, above)")
        elif end.destroys:
            if end.built_ddp:  # gloo aborts on a group destroyed under a live reducer
                self.emit(depth, "del ddp  # DDP's reducer holds the group: it goes first")
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
        """These ranks' items: what they share at the start and at the end once (folded
        into loops, with their own peers and groups as expressions); where they differ
        between, one ``if who ...`` branch per set of ranks that go on alike."""
        ranks = sorted(progs)
        rel = {r: [self.rel_key(x, r) for x in progs[r]] for r in ranks}
        head = _common(rel, ranks, 0, min(len(k) for k in rel.values()))
        self.columns(depth, ranks, [tuple(progs[r][i] for r in ranks) for i in range(head)])
        rest = {r: progs[r][head:] for r in ranks}
        room = min(len(p) for p in rest.values())
        tail = _common({r: rel[r][::-1] for r in ranks}, ranks, 0, room)
        middle = {r: p[:len(p) - tail] for r, p in rest.items() if len(p) > tail}
        if middle:
            self.branches(depth, middle, {r: self.rel_key(p[0], r) for r, p in middle.items()},
                          len(middle) < len(rest))
        self.columns(depth, ranks, [tuple(rest[r][len(rest[r]) - tail + i] for r in ranks)
                                    for i in range(tail)])

    def columns(self, depth: int, ranks: list[int], cols: list[tuple[Any, ...]]) -> None:
        folded = fold(cols, key=lambda col: tuple(item_key(x) for x in col))
        self.folded(depth, ranks, folded)

    def folded(self, depth: int, ranks: list[int], items: list[Any]) -> None:
        for item in items:
            if isinstance(item, Loop):
                self.emit(depth, f"for {'step' if depth == 1 else '_'} in range({item.count}):")
                self.folded(depth + 1, ranks, list(item.body))
            else:
                self.column(depth, ranks, item)

    def branches(self, depth: int, rest: dict[int, list[Any]], keys: dict[int, Hashable],
                 some_ended: bool) -> None:
        parts: dict[Hashable, list[int]] = {}
        for r in sorted(rest):
            parts.setdefault(keys[r], []).append(r)
        sets = list(parts.values())
        if len(sets) == 1 and not some_ended:
            self.block(depth, rest)
            return
        self.uses_who = True
        for n, ranks in enumerate(sets):
            if n == len(sets) - 1 and n > 0 and not some_ended:
                self.emit(depth, f"else:  # rank{'s' if len(ranks) > 1 else ''} "
                                 f"{', '.join(map(str, ranks))}")
            else:
                word = "if" if n == 0 else "elif"
                cond = (f"who == {ranks[0]}" if len(ranks) == 1 else
                        f"who in ({', '.join(map(str, ranks))})")
                self.emit(depth, f"{word} {cond}:")
            self.block(depth + 1, {r: rest[r] for r in ranks})


def _arguments(code: str) -> list[str]:
    """``f(a, [z(1, 2), b])`` split at the commas between a call's arguments and a list's
    items (["f(a", "[z(1, 2)", "b])"]), not inside a tensor's shape."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(code):
        depth += (ch in "([") - (ch in ")]")
        if code.startswith(", ", i) and depth <= 2:
            out.append(code[start:i])
            start = i + 2
    return out + [code[start:]]


def _common(keys: dict[int, list[Hashable]], ranks: list[int], start: int, limit: int) -> int:
    """How many keys from ``start`` on every rank has alike (at most ``limit``)."""
    n = start
    first = keys[ranks[0]]
    while n < limit and all(keys[r][n] == first[n] for r in ranks):
        n += 1
    return n - start


def _group_var(name: str, index: int) -> str:
    return f"g{name}" if re.fullmatch(r"\d+", name) else f"g_{index + 1}"


PRELUDE = '''import os
import threading
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
    """Stay here as the recorded rank did, outside any collective, until stopped: spinning
    if it was busy, else blocked for good (no timed sleep: that would read as a wait the
    program chose, which is progress, not a hang)."""
    while busy:
        sum(range(100_000))
    threading.Event().wait()
'''


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
    if any(st.op == DDP_BUILD for plan in job.plans for st in plan.steps):
        prelude = prelude.replace("import torch.distributed as dist\n",
                                  "import torch.distributed as dist\nfrom torch.nn.parallel "
                                  "import DistributedDataParallel as DDP\n")
        prelude += "\n\n\n" + PARAMS_CLASS
    out = header_lines(job) + [prelude]
    if any(st.op == OPTIMIZER_STEP for plan in job.plans for st in plan.steps):
        out += ["", "", *STEPS_CLASS.splitlines(), "", "",
                "def optimizer_step():", f'{INDENT}"""An optimizer step, as the job took one '
                'after its gradients were reduced."""', f"{INDENT}OPTIMIZER.step()"]
    for name, site in job.loaders:
        doc = literal(f"{site}  (replayed: n batches of other numbers on each rank).")
        out += ["", "", f"def {name}(n, rank):", f"{INDENT}{doc}",
                f"{INDENT}return iter(DataLoader(range(rank * n, rank * n + n)))"]
    out += writer.helpers
    out += ["", "", "def main():", f'{INDENT}rank = int(os.environ["RANK"])',
            f'{INDENT}assert int(os.environ["WORLD_SIZE"]) == {job.world_size}, '
            f'"run it with {job.world_size} ranks"']
    for r in never:
        busy = next(p.busy for p in job.plans if p.rank == r)
        out.append(f"{INDENT}if rank == {r}:  # rank {r} never called init_process_group")
        out.append(f"{INDENT * 2}stall(busy={busy})")
    if writer.uses_who:
        out.append(f"{INDENT}{WHO}")
    out.append(f'{INDENT}dist.init_process_group("gloo")')
    for name, ranks in job.groups:
        out.append(f"{INDENT}{writer.group_vars[name]} = dist.new_group({list(ranks)})")
    for table, name in writer.group_tables.items():
        out.append(f"{INDENT}{name} = {table}  # the group each rank made these calls on")
    out += writer.lines
    out += ["", "", 'if __name__ == "__main__":', f"{INDENT}main()", ""]
    return safe_text.checked("\n".join(out))
