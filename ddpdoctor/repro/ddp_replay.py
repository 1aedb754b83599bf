"""A recorded DDP replayed through a real DDP of stand-in parameters: its construction and,
per backward pass, its gradient buckets (as ddpdoctor sees the job's: DDP buckets, inside a
step)."""

from __future__ import annotations

from dataclasses import replace

from ddpdoctor.repro.steps import Step

CONSTRUCTION_CHECK = "_verify_params_across_processes"  # torch's, called by DDP's constructor
DDP_BUILD = "ddp_build"  # DDP(Params(*shapes)): its construction check and state broadcast
DDP_BACKWARD = "ddp_backward"  # one backward pass through it: its gradient buckets


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _passes(steps: list[Step], start: int) -> int:
    """How many steps from ``start`` on are one backward pass's buckets (0, 1, ...)."""
    n = 0
    while start + n < len(steps) and steps[start + n].bucket == n:
        n += 1
    return n


def _default_bucket(step: Step) -> bool:
    """A bucket DDP's default hook reduces (an averaging all-reduce of float32), blocking."""
    return step.op == "all_reduce" and step.reduce_op == "avg" and step.slot < 0 and \
        not step.wait and set(step.dtypes) <= {"float32"}


def rank_ddp_steps(steps: tuple[Step, ...]) -> tuple[Step, ...] | None:
    """The rank's steps with each DDP built (its check and the state broadcast after it) one
    DDP_BUILD and each backward pass's buckets one DDP_BACKWARD; None where the buckets do
    not fit the DDP built before them (another hook, several buckets a pass, no DDP
    recorded)."""
    out: list[Step] = []
    items = list(steps)
    reduced = -1  # the numel the DDP built last reduces per pass; -1: none built
    i = 0
    while i < len(items):
        st = items[i]
        if st.op == CONSTRUCTION_CHECK:
            reduced = sum(_numel(s) for s in st.in_shapes)
            out.append(replace(st, op=DDP_BUILD, framework_site=""))
            sync = i + 1 < len(items) and items[i + 1].op == "broadcast" and \
                items[i + 1].site == st.site and items[i + 1].bucket < 0
            i += 2 if sync else 1
        elif st.bucket >= 0:
            n = _passes(items, i)
            run = items[i:i + n]
            total = sum(_numel(s) for b in run for s in b.in_shapes)
            if n != 1 or total != reduced or not _default_bucket(st):
                return None  # several buckets: torch lays them out again after the first
                # pass, in the order the gradients came, which stand-ins need not share
            out.append(Step(DDP_BACKWARD, st.group, in_shapes=tuple(b.in_shapes[0] for b in run),
                            site=st.site, source=st.source, ranked=st.ranked))
            i += n
        else:
            out.append(st)
            i += 1
    return tuple(out)


def with_real_ddp(steps: tuple[tuple[Step, ...], ...]) -> tuple[tuple[Step, ...], ...]:
    """Every rank's steps with its DDP replayed through a real DDP where all ranks' buckets
    fit it, else the steps as they are (buckets as plain all-reduces)."""
    if not any(st.bucket >= 0 for rank_steps in steps for st in rank_steps):
        return steps
    new = tuple(rank_ddp_steps(rank_steps) for rank_steps in steps)
    return steps if any(s is None for s in new) else new  # type: ignore[return-value]


PARAMS_CLASS = '''class Params(torch.nn.Module):
    """The job's model as its DDP saw it: zero parameters of the shapes it reduced."""

    def __init__(self, *shapes):
        super().__init__()
        self.p = torch.nn.ParameterList(torch.nn.Parameter(z(*s)) for s in shapes)

    def forward(self):
        return sum(p.sum() for p in self.p)'''


def build_text(step: Step, group: str | None) -> str:
    """``ddp = DDP(Params((2, 8), (2,)))``: the job's DDP, on its parameters' shapes."""
    shapes = ", ".join(f"({', '.join(map(str, s))}{',' if len(s) == 1 else ''})"
                       for s in step.in_shapes)
    return f"ddp = DDP(Params({shapes}){f', process_group={group}' if group else ''})"


def backward_note(step: Step) -> str:
    """What a DDP_BACKWARD stands for, for its comment."""
    sizes = ", ".join(str(_numel(s)) for s in step.in_shapes)
    return f"backward through DDP: bucket{'s' if len(step.in_shapes) > 1 else ''} of {sizes}"
